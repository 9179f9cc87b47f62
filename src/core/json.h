/* A small strict JSON parser for file headers (safetensors), config.json and tokenizer files. The
 * whole document becomes an array of nodes; containers list their children through first/next
 * indices. Depth (32) and memory bounded: every parse is given the most bytes it may allocate. */
#ifndef MW_JSON_H
#define MW_JSON_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

typedef enum { MW_JSON_NULL, MW_JSON_BOOL, MW_JSON_NUM, MW_JSON_STR, MW_JSON_ARR, MW_JSON_OBJ } mw_json_type;

typedef struct mw_json_node { /* 48 bytes */
    mw_json_type type;
    int first, next;   /* first child, next sibling (-1: none); object children are values */
    int is_int;        /* MW_JSON_NUM without fraction or exponent, fits int64 */
    const char *key;   /* for children of an object: the key (decoded, NUL-terminated) */
    const char *str;   /* MW_JSON_STR: decoded, NUL-terminated */
    double num;
    int64_t i;
} mw_json_node;

typedef struct mw_json {
    mw_json_node *nodes;
    int n, cap;
    char *strings; /* decoded keys and strings */
    size_t slen, scap;
    size_t bytes; /* allocated: nodes and strings, at capacity */
} mw_json;

/* The memory limits of the callers' parses. A node takes 48 bytes and a 2-byte element ("0,")
 * is a node, so a document may need ~24 times its size (more while arrays double): the limit,
 * not the file size, bounds a parse. Measured (memory held at the end, at capacity): GPT-2's
 * encoder.json (1.0 MB, 50258 nodes) 3.5 MiB; a tokenizer.json built from it and vocab.bpe 7.0
 * MiB with merges as "a b" strings (1.5 MB, 100296 nodes), 13.0 MiB as ["a", "b"] pairs (1.8 MB,
 * 200296 nodes); GPT-2 124M's safetensors header (15.7 kB, 1209 nodes) 104 KiB; a config.json
 * (under 1 kB) 4 KiB. The limits leave room for vocabularies and models many times larger. */
#define MW_JSON_MAX_SAFETENSORS ((size_t)64 << 20) /* a header: ~1 M nodes, over 100 k tensors */
#define MW_JSON_MAX_TOKENIZER ((size_t)256 << 20)  /* encoder.json, tokenizer.json */
#define MW_JSON_MAX_CONFIG ((size_t)16 << 20)      /* config.json */

/* Parses text[0..len), allocating at most max_bytes (nodes and decoded strings). On failure
 * MW_ERR_FORMAT with "what: <reason> at byte N", or "what: parsing it would take more than N MiB
 * of memory" past max_bytes (nothing is then held), or MW_ERR_NOMEM. */
mw_status mw_json_parse(mw_json *j, const char *text, size_t len, const char *what, size_t max_bytes);
void mw_json_free(mw_json *j);
/* The child of object node obj with key, or -1. */
int mw_json_get(const mw_json *j, int obj, const char *key);
#endif
