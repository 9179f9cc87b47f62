/* GPUs as a plan for a cluster must count them: a table of devices (memory as the vendor states it
 * and as nvidia-smi reports it, peak dense tensor FLOP/s, NVLink and typical inter-node bandwidth),
 * and the fixed costs a plan does not see (the CUDA context, NCCL's buffers, allocator
 * fragmentation). Every figure carries the source it was taken from, printed beside it; a figure
 * without one is 0 and printed as "not stated". Data and arithmetic only: calls src/core (status). */
#ifndef MW_GPU_H
#define MW_GPU_H
#include <stdint.h>

#include "memwall.h"

typedef struct {
    const char *name;         /* the --gpu name: a100-80g, h100-80g, h200, ... */
    const char *product;      /* the vendor's product name */
    const char *mem_stated;   /* the capacity as the vendor writes it, e.g. "80GB HBM3" */
    uint64_t mem_stated_bytes;/* that figure in bytes, read as decimal GB (10^9): what "GB" means in SI */
    uint64_t mem_smi_bytes;   /* memory.total as nvidia-smi reports it (MiB * 2^20): what a process
                                 can see before the CUDA context; 0 when no source was found */
    double bf16_flops, fp16_flops, tf32_flops; /* peak dense tensor-core FLOP/s (no 2:4 sparsity) */
    double nvlink_bytes_s;    /* NVLink per GPU, total of both directions, bytes/s (0: none) */
    double inter_bytes_s;     /* a typical node's network per GPU, one direction, bytes/s (0: none stated) */
    const char *src_mem, *src_smi, *src_flops, *src_nvlink, *src_inter;
} mw_gpu;

int mw_gpu_count(void);
const mw_gpu *mw_gpu_at(int i);
/* The entry named name; NULL (and mw_last_error naming the choices) when there is none. */
const mw_gpu *mw_gpu_find(const char *name);
/* "a100-80g, h100-80g, ...": the names, for messages and --help. */
const char *mw_gpu_names(void);

/* The fixed costs on one GPU that memwall's plan does not contain. */
typedef struct {
    uint64_t cuda_context;        /* bytes */
    uint64_t nccl_buffers;        /* bytes: buffsize * channels * peers * communicators */
    uint64_t nccl_buffsize;       /* the figures it was taken from */
    int nccl_channels, nccl_peers, nccl_comms;
    double frag_fraction;         /* of the device memory left to the plan */
    uint64_t fragmentation;       /* bytes: frag_fraction * (device - context - nccl) */
    uint64_t usable;              /* device - context - nccl - fragmentation: what a plan may use */
    const char *src_context, *src_nccl, *src_frag;
} mw_gpu_fixed;

/* NCCL's defaults (NCCL user guide, Environment Variables: NCCL_BUFFSIZE, default 4194304 = 4 MiB). */
#define MW_GPU_NCCL_BUFFSIZE (4ull << 20)

typedef struct {
    uint64_t nccl_buffsize;  /* 0: NCCL_BUFFSIZE's default */
    int nccl_channels;       /* channels per communicator (NCCL chooses; stated by the caller) */
    int nccl_peers;          /* peers each channel keeps buffers for: 2 in a ring (send, receive) */
    int nccl_comms;          /* communicators on the GPU (DP, TP, PP, EP groups ...) */
    double frag_fraction;    /* < 0: the default, with its source */
} mw_gpu_fixed_opts;

/* Fills out for a device of device_bytes (mem_smi_bytes of a table entry, or --device-mem).
 * MW_ERR_ARG when a count is negative or the fixed costs alone exceed the device. */
mw_status mw_gpu_fixed_costs(uint64_t device_bytes, const mw_gpu_fixed_opts *o, mw_gpu_fixed *out);
#endif
