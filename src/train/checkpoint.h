/* Internal: the tensor index of a checkpoint file, for streaming exports. */
#ifndef MW_CHECKPOINT_H
#define MW_CHECKPOINT_H
#include "memwall.h"

#define MW_CKPT_MAX_INDEX 65536
typedef struct mw_ckpt_entry {
    char name[256];
    int ndim, dims[2];
    uint64_t numel, offset; /* file offset of the float32 parameters */
} mw_ckpt_entry;
typedef struct mw_ckpt_index {
    int n;
    mw_ckpt_entry *e; /* caller-provided, MW_CKPT_MAX_INDEX entries */
} mw_ckpt_index;

/* Verifies path and fills idx with every tensor's name, shape and parameter offset. */
mw_status mw_ckpt_index_read(const char *path, mw_ckpt_info *info, mw_ckpt_index *idx);
#endif
