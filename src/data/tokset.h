/* The manifest of a sharded token set (PREFIX.manifest.json), written by prepare and read by the
 * loader: the shards of each split in order, with their token counts and checksums, the
 * vocabulary and the tokenizer, and the parts (one per prepare run: the first, then each
 * --append). Format in docs/data.md, "Token sets". */
#ifndef MW_TOKSET_H
#define MW_TOKSET_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

#define MW_SET_MAX_SHARDS 1000000        /* per split */
#define MW_SET_MAX_BYTES ((size_t)256 << 20) /* the most a manifest's parse may allocate */

typedef struct mw_set_shard {
    char file[256]; /* a name in the manifest's directory: no '/', not "." or ".." */
    uint64_t tokens;
    uint32_t crc; /* CRC-32C of the shard's block-checksum table (its contents, in 4 bytes per 64 KiB) */
} mw_set_shard;

typedef struct mw_set_part { /* one prepare run's additions */
    uint64_t documents, bytes, train, val; /* train and val: tokens it added to each split */
} mw_set_part;

typedef struct mw_manifest {
    uint32_t vocab;
    int width;
    mw_tokenizer_id tok;
    mw_set_shard *shard[2]; /* 0: train, 1: val */
    int n[2], cap[2];
    mw_set_part *part;
    int nparts, partcap;
} mw_manifest;

/* Parses and checks a manifest (what names it in errors): every field present and in range,
 * the parts adding up to the shards. MW_ERR_FORMAT naming what is wrong; MW_ERR_NOMEM. */
mw_status mw_manifest_parse(mw_manifest *m, const char *text, size_t len, const char *what);
/* mw_manifest_parse of the file at path; MW_ERR_IO when it cannot be read. */
mw_status mw_manifest_read(mw_manifest *m, const char *path);
/* Writes m to path atomically: a temporary file beside it, fsync, rename, fsync of the directory. */
mw_status mw_manifest_write(const mw_manifest *m, const char *path);
mw_status mw_manifest_add_shard(mw_manifest *m, int split, const char *file, uint64_t tokens, uint32_t crc);
mw_status mw_manifest_add_part(mw_manifest *m, const mw_set_part *p);
void mw_manifest_free(mw_manifest *m);
/* The manifest path of a set: PREFIX.manifest.json. */
void mw_manifest_path(const char *prefix, char *buf, size_t n);
/* A valid shard file name (1..255 bytes, printable, no '/' and not "." or ".."). */
int mw_set_file_valid(const char *name);
#endif
