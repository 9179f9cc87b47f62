/* Which compute kernels this CPU and this build can run, and which one runs.
 *
 * The library is built for a baseline instruction set (BASELINE in the Makefile: x86-64-v3 by
 * default, i.e. AVX2 + FMA) and carries the GEMM micro-kernels of every instruction set of its
 * architecture, each compiled for its own target. The kernel in use is chosen once: by
 * mw_kernel_set (the CLI's --kernel), else by MEMWALL_KERNEL, else the best one the CPU has
 * (CPUID). Every kernel of the FMA family (all but amx) gives the same bits (each element of a
 * product is one fma chain in k order), so the choice among them changes speed, never results.
 * amx runs bfloat16 products on AMX tiles with their own bits (the AMX family); auto picks it for
 * bfloat16 products only, where it is faster, and fp32 products never run on it. */
#ifndef MW_ISA_H
#define MW_ISA_H

typedef enum mw_kernel_id {
    MW_KERNEL_PORTABLE = 0, /* plain C, any CPU */
    MW_KERNEL_AVX2,         /* x86-64 AVX2 + FMA (x86-64-v3) */
    MW_KERNEL_AVX512,       /* x86-64 AVX-512F */
    MW_KERNEL_AVX512BF16,   /* x86-64 AVX-512F + AVX512_BF16: vdpbf16ps for bfloat16 products */
    MW_KERNEL_NEON,         /* aarch64 Advanced SIMD */
    MW_KERNEL_AMX,          /* x86-64 AMX-BF16 tiles for bfloat16 products (their own bits, the AMX
                               family: gemm_amx.h); avx512's kernel for fp32 ones */
    MW_KERNEL_COUNT
} mw_kernel_id;

/* "portable", "avx2", "avx512", "avx512bf16", "neon", "amx" */
const char *mw_kernel_id_name(mw_kernel_id k);
/* 1 when this build carries kernel k and the running CPU can execute it */
int mw_kernel_id_supported(mw_kernel_id k);
/* the kernel in use (resolving the default on first use): fp32 products run it (amx's are avx512's) */
mw_kernel_id mw_kernel_current(void);
/* the kernel bfloat16 products run: the one in use, except that auto picks amx where it is usable
 * and faster (mw_gemm_amx_pays) */
mw_kernel_id mw_kernel_current_bf16(void);
#endif
