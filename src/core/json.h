/* A small strict JSON parser for file headers (safetensors). The whole document becomes an array
 * of nodes; containers list their children through first/next indices. Depth and size bounded. */
#ifndef MW_JSON_H
#define MW_JSON_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

typedef enum { MW_JSON_NULL, MW_JSON_BOOL, MW_JSON_NUM, MW_JSON_STR, MW_JSON_ARR, MW_JSON_OBJ } mw_json_type;

typedef struct mw_json_node {
    mw_json_type type;
    int first, next;   /* first child, next sibling (-1: none); object children are values */
    const char *key;   /* for children of an object: the key (decoded, NUL-terminated) */
    const char *str;   /* MW_JSON_STR: decoded, NUL-terminated */
    double num;
    int is_int;        /* MW_JSON_NUM without fraction or exponent, fits int64 */
    int64_t i;
} mw_json_node;

typedef struct mw_json {
    mw_json_node *nodes;
    int n, cap;
    char *strings; /* decoded keys and strings */
    size_t slen, scap;
} mw_json;

/* Parses text[0..len). On failure MW_ERR_FORMAT with "what: <reason> at byte N". */
mw_status mw_json_parse(mw_json *j, const char *text, size_t len, const char *what);
void mw_json_free(mw_json *j);
/* The child of object node obj with key, or -1. */
int mw_json_get(const mw_json *j, int obj, const char *key);
#endif
