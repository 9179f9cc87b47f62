/* safetensors files: a checked reader and a streaming writer.
 *
 * Format: u64 little-endian header length N, N bytes of JSON {name: {"dtype", "shape",
 * "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data; offsets are relative
 * to the data's start. The reader trusts nothing: header size bounds, JSON syntax, known dtypes,
 * shapes whose byte size equals the offsets' span, offsets inside the file, no two tensors
 * overlapping, no duplicate names. */
#ifndef MW_SAFETENSORS_H
#define MW_SAFETENSORS_H
#include <stdint.h>

#include "memwall.h"

#define MW_ST_MAX_HEADER 100000000ull /* the format's own limit */

typedef enum { MW_ST_F32, MW_ST_F16, MW_ST_BF16, MW_ST_F64, MW_ST_OTHER } mw_st_dtype;

typedef struct mw_st_tensor {
    char *name;
    mw_st_dtype dtype;
    int elem_size, ndim;
    int64_t shape[8];
    uint64_t begin, end; /* absolute file offsets of the data */
} mw_st_tensor;

typedef struct mw_st_file {
    int fd;
    char path[1024];
    uint64_t size;
    int n;
    mw_st_tensor *t;
} mw_st_file;

/* Opens and checks a safetensors file. MW_ERR_IO / MW_ERR_FORMAT naming the file and problem. */
mw_status mw_st_open(mw_st_file *f, const char *path);
/* Checks a header already in memory (for the fuzzer and for mw_st_open): len bytes of JSON
 * describing a data region of data_size bytes starting at file offset data_start. */
mw_status mw_st_parse_header(mw_st_file *f, const char *json, uint64_t len, uint64_t data_start,
                             uint64_t data_size);
void mw_st_close(mw_st_file *f);
/* The tensor called name, or NULL. */
const mw_st_tensor *mw_st_find(const mw_st_file *f, const char *name);
/* Reads tensor t as float32 into dst (numel floats). With transpose, t is (R,C) on disk and dst
 * receives (C,R). Streams through a fixed buffer. */
mw_status mw_st_read_f32(const mw_st_file *f, const mw_st_tensor *t, float *dst, int transpose);
/* ... keeping the elements map keeps: element `whole` of dst's layout (after the transpose) goes
 * to dst[*local] when map returns 1 (a tensor-parallel rank's shard), nowhere when 0. */
mw_status mw_st_read_f32_map(const mw_st_file *f, const mw_st_tensor *t, float *dst, int transpose,
                             int (*map)(void *ctx, uint64_t whole, size_t *local), void *ctx);
#endif
