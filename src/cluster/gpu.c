/* The GPU table and the fixed costs of a GPU process (gpu.h). Owns the table; calls src/core. */
#include "gpu.h"

#include <stdio.h>
#include <string.h>

#include "../core/status.h"

#define MIB (1ull << 20)
#define T 1e12
#define G 1e9

/* Sources. The FLOP/s are the datasheets' dense figures: NVIDIA prints the 2:4-sparsity figure
 * with an asterisk and "specifications 1/2 lower without sparsity". */
#define SRC_A100 "NVIDIA A100 Tensor Core GPU datasheet (SXM4): 80GB HBM2e / 40GB HBM2; BF16/FP16 312, TF32 156 TFLOPS dense; NVLink 600 GB/s"
#define SRC_H100 "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80GB HBM3; BF16/FP16 1,979, TF32 989 TFLOPS with sparsity (half dense: 989.4 / 494.7); NVLink 900 GB/s"
#define SRC_H200 "NVIDIA H200 Tensor Core GPU datasheet (SXM): 141GB HBM3e; BF16/FP16 1,979, TF32 989 TFLOPS with sparsity (half dense, as H100 SXM); NVLink 900 GB/s"
#define SRC_L40S "NVIDIA L40S datasheet: 48GB GDDR6; BF16/FP16 362.05, TF32 183 TFLOPS dense (733 / 366 with sparsity); no NVLink, PCIe Gen4 x16 64 GB/s"
#define SMI(x) "nvidia-smi memory.total " x " as printed in public nvidia-smi outputs (GitHub, found with the code index)"
#define SRC_IB_DGXH "DGX H100/H200 system: eight ConnectX-7 400 Gb/s (NDR InfiniBand) ports, one per GPU: 50 GB/s each way"
#define SRC_IB_DGXA "DGX A100 system: eight ConnectX-6 200 Gb/s (HDR InfiniBand) ports, one per GPU: 25 GB/s each way"

static const mw_gpu gpus[] = {
    {"a100-80g", "NVIDIA A100-SXM4-80GB", "80GB HBM2e", 80000000000ull, 81920 * MIB, 312 * T, 312 * T, 156 * T,
     600 * G, 25 * G, SRC_A100, SMI("81920MiB (NVIDIA A100-SXM4-80GB)"), SRC_A100, SRC_A100, SRC_IB_DGXA},
    {"a100-40g", "NVIDIA A100-SXM4-40GB", "40GB HBM2", 40000000000ull, 0, 312 * T, 312 * T, 156 * T, 600 * G,
     25 * G, SRC_A100, "not stated (no nvidia-smi output found)", SRC_A100, SRC_A100, SRC_IB_DGXA},
    {"h100-80g", "NVIDIA H100 80GB HBM3 (SXM5)", "80GB HBM3", 80000000000ull, 81559 * MIB, 989.4 * T, 989.4 * T,
     494.7 * T, 900 * G, 50 * G, SRC_H100, SMI("81559MiB (NVIDIA H100 80GB HBM3)"), SRC_H100, SRC_H100,
     SRC_IB_DGXH},
    {"h200", "NVIDIA H200 (SXM)", "141GB HBM3e", 141000000000ull, 143771 * MIB, 989.4 * T, 989.4 * T, 494.7 * T,
     900 * G, 50 * G, SRC_H200, SMI("143771MiB (NVIDIA H200)"), SRC_H200, SRC_H200, SRC_IB_DGXH},
    {"l40s", "NVIDIA L40S", "48GB GDDR6", 48000000000ull, 46068 * MIB, 362.05 * T, 362.05 * T, 183 * T, 0, 0,
     SRC_L40S, SMI("46068MiB (NVIDIA L40S)"), SRC_L40S, SRC_L40S,
     "not stated (PCIe servers vary): give --inter-bw"},
};

int mw_gpu_count(void) { return (int)(sizeof gpus / sizeof gpus[0]); }

const mw_gpu *mw_gpu_at(int i) { return i >= 0 && i < mw_gpu_count() ? &gpus[i] : NULL; }

const char *mw_gpu_names(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t k = 0;
        for (int i = 0; i < mw_gpu_count() && k < sizeof buf; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? ", " : "", gpus[i].name);
    }
    return buf;
}

const mw_gpu *mw_gpu_find(const char *name) {
    for (int i = 0; name && i < mw_gpu_count(); i++)
        if (strcmp(name, gpus[i].name) == 0) return &gpus[i];
    mw_fail(MW_ERR_ARG, "unknown GPU '%s': the table has %s (or give --device-mem SIZE)", name ? name : "",
            mw_gpu_names());
    return NULL;
}

/* A process's CUDA context, measured by a user: "x = th.randn(1).cuda(1) ... my gpu memory usage
 * for that process goes from zero to 723 MiB" - "The first CUDA call creates the CUDA context"
 * (PyTorch forum thread 73021, https://discuss.pytorch.org/t/73021). It holds PyTorch's kernels;
 * memwall's CUDA backend has not been measured (no GPU in the session that wrote this). */
#define CONTEXT_BYTES (723 * MIB)
#define SRC_CONTEXT "measured: 723 MiB after the first CUDA call of a PyTorch process (discuss.pytorch.org/t/73021); varies with the driver, CUDA version and lazy loading"
#define SRC_NCCL "NCCL user guide, Environment Variables: NCCL_BUFFSIZE (default 4 MiB) per channel and peer; channels and communicators as stated"
/* ZeRO (Rajbhandari et al., SC20), Section 3.2, memory fragmentation: out-of-memory seen with over
 * 30% of the memory still free, in extreme cases: a worst case, not a typical figure. */
#define FRAG_DEFAULT 0.30
#define SRC_FRAG "ZeRO paper (arXiv:1910.02054) Sec. 3.2: OOM observed with over 30% of memory still available (an extreme case)"

mw_status mw_gpu_fixed_costs(uint64_t device_bytes, const mw_gpu_fixed_opts *o, mw_gpu_fixed *out) {
    if (!device_bytes) return mw_fail(MW_ERR_ARG, "the device's memory is 0 bytes");
    if (o->nccl_channels < 0 || o->nccl_peers < 0 || o->nccl_comms < 0 || o->frag_fraction >= 1)
        return mw_fail(MW_ERR_ARG, "NCCL channels, peers and communicators must be >= 0 and fragmentation < 1");
    memset(out, 0, sizeof *out);
    out->cuda_context = CONTEXT_BYTES;
    uint64_t buf = o->nccl_buffsize ? o->nccl_buffsize : MW_GPU_NCCL_BUFFSIZE;
    out->nccl_buffers = buf * (uint64_t)o->nccl_channels * (uint64_t)o->nccl_peers * (uint64_t)o->nccl_comms;
    out->nccl_buffsize = buf;
    out->nccl_channels = o->nccl_channels, out->nccl_peers = o->nccl_peers, out->nccl_comms = o->nccl_comms;
    out->frag_fraction = o->frag_fraction < 0 ? FRAG_DEFAULT : o->frag_fraction;
    out->src_context = SRC_CONTEXT;
    out->src_nccl = SRC_NCCL;
    out->src_frag = o->frag_fraction < 0 ? SRC_FRAG : "as given";
    uint64_t fixed = out->cuda_context + out->nccl_buffers;
    if (fixed >= device_bytes)
        return mw_fail(MW_ERR_ARG, "the CUDA context and NCCL buffers (%llu bytes) leave nothing of the device's "
                                   "%llu bytes",
                       (unsigned long long)fixed, (unsigned long long)device_bytes);
    out->fragmentation = (uint64_t)(out->frag_fraction * (double)(device_bytes - fixed));
    out->usable = device_bytes - fixed - out->fragmentation;
    return MW_OK;
}
