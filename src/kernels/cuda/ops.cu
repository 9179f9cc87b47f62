// CUDA kernels of the step graph's ops: cuda_ops.h says what each computes and the rules they keep
// (fixed-order reductions, no atomics, cuBLAS with TF32 off). Compiled with --fmad=false, so that
// an elementwise formula the CPU kernels share (AdamW, the embeddings' sums) gives their bits.
#include "cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mw_cuda {
    cudaStream_t s;
    cublasHandle_t h;
    void *ws; // cuBLAS's workspace: fixed, so that its algorithm choice is too
    size_t ws_bytes;
    float *part; // column sums' partials, and attention's D = rowsum(dout * out)
    size_t part_floats;
    int32_t *grp; // encoder backward: rows grouped by token id
    size_t grp_ints;
    int32_t *hgrp;
    size_t hgrp_ints;
    cudaError_t first; // the first launch error, reported by mw_cuda_sync
    char name[256];
};

static void note(mw_cuda *cu, cudaError_t e) {
    if (e != cudaSuccess && cu->first == cudaSuccess) cu->first = e;
}
#define LAUNCHED(cu) note(cu, cudaGetLastError())

static void *grow(mw_cuda *cu, void **p, size_t *cap, size_t need, size_t elt) {
    if (need <= *cap) return *p;
    note(cu, cudaStreamSynchronize(cu->s));
    if (*p) cudaFree(*p);
    *p = NULL;
    *cap = 0;
    cudaError_t e = cudaMalloc(p, need * elt);
    note(cu, e);
    if (e == cudaSuccess) *cap = need;
    return *p;
}

extern "C" int mw_cuda_probe(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, n, "%s", cudaGetErrorString(e));
        return 0;
    }
    if (count == 0) {
        snprintf(why, n, "no CUDA device");
        return 0;
    }
    return 1;
}

extern "C" int mw_cuda_init(mw_cuda **out, char *why, size_t n) {
    *out = NULL;
    if (!mw_cuda_probe(why, n)) return -1;
    mw_cuda *cu = (mw_cuda *)calloc(1, sizeof *cu);
    if (!cu) {
        snprintf(why, n, "out of memory");
        return -1;
    }
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, 0);
    if (e == cudaSuccess) snprintf(cu->name, sizeof cu->name, "%s", prop.name);
    if (e == cudaSuccess) e = cudaStreamCreate(&cu->s);
    cu->ws_bytes = 32u << 20;
    if (e == cudaSuccess) e = cudaMalloc(&cu->ws, cu->ws_bytes);
    if (e != cudaSuccess) {
        snprintf(why, n, "%s", cudaGetErrorString(e));
        mw_cuda_free(cu);
        return -1;
    }
    if (cublasCreate(&cu->h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(cu->h, cu->s) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(cu->h, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS ||
        cublasSetAtomicsMode(cu->h, CUBLAS_ATOMICS_NOT_ALLOWED) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(cu->h, cu->ws, cu->ws_bytes) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, n, "cuBLAS could not be set up (no TF32, no atomics, a fixed workspace)");
        mw_cuda_free(cu);
        return -1;
    }
    *out = cu;
    return 0;
}

extern "C" void mw_cuda_free(mw_cuda *cu) {
    if (!cu) return;
    if (cu->s) cudaStreamSynchronize(cu->s);
    if (cu->h) cublasDestroy(cu->h);
    cudaFree(cu->ws);
    cudaFree(cu->part);
    cudaFree(cu->grp);
    free(cu->hgrp);
    if (cu->s) cudaStreamDestroy(cu->s);
    free(cu);
}

extern "C" int mw_cuda_sync(mw_cuda *cu, char *why, size_t n) {
    note(cu, cudaStreamSynchronize(cu->s));
    note(cu, cudaGetLastError());
    if (cu->first == cudaSuccess) return 0;
    snprintf(why, n, "%s", cudaGetErrorString(cu->first));
    return -1;
}

extern "C" void mw_cuda_device(mw_cuda *cu, char *name, size_t n, size_t *free_b, size_t *total_b) {
    snprintf(name, n, "%s", cu->name);
    *free_b = *total_b = 0;
    cudaMemGetInfo(free_b, total_b);
}

static unsigned blocks(long n, int per) { return (unsigned)((n + per - 1) / per); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---- embeddings ---------------------------------------------------------------------------------

__global__ void k_encoder_fwd(float *out, const int32_t *inp, const float *wte, const float *wpe, long N, int T,
                              int C) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= N * C) return;
    long n = i / C;
    int c = (int)(i % C);
    float e = wte[(long)inp[n] * C + c];
    out[i] = wpe ? e + wpe[(n % T) * C + c] : e;
}

// per group u (one token id): table row += the rows listed, in order
__global__ void k_group_sum(float *table, const float *dout, const int32_t *grp, int ngroups, int C) {
    // grp: ngroups+1 starts, then ngroups ids, then the rows
    int u = blockIdx.x; // groups on x: there may be more than y's 65535
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (u >= ngroups || c >= C) return;
    const int32_t *start = grp, *ids = grp + ngroups + 1, *rows = ids + ngroups;
    float *e = table + (long)ids[u] * C + c;
    float acc = *e;
    for (int k = start[u]; k < start[u + 1]; k++) acc += dout[(long)rows[k] * C + c];
    *e = acc;
}

__global__ void k_wpe_sum(float *dwpe, const float *dout, int B, int T, int C) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)T * C) return;
    long t = i / C;
    int c = (int)(i % C);
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[((long)b * T + t) * C + c];
    dwpe[i] = acc;
}

// the rows of each token id, in row order (a counting sort), uploaded to cu->grp
static int group_rows(mw_cuda *cu, const int32_t *inp, int N) {
    int32_t mx = 0;
    for (int i = 0; i < N; i++) mx = inp[i] > mx ? inp[i] : mx;
    size_t need = (size_t)mx + 2 + 2 * (size_t)N + (size_t)N + 1;
    if (need > cu->hgrp_ints) {
        free(cu->hgrp);
        cu->hgrp = (int32_t *)malloc(need * sizeof(int32_t));
        cu->hgrp_ints = cu->hgrp ? need : 0;
        if (!cu->hgrp) return -1;
    }
    int32_t *cnt = cu->hgrp; // mx+1 counters, then the layout k_group_sum reads
    memset(cnt, 0, ((size_t)mx + 1) * sizeof *cnt);
    for (int i = 0; i < N; i++) cnt[inp[i]]++;
    int ng = 0;
    for (int32_t v = 0; v <= mx; v++) ng += cnt[v] > 0;
    int32_t *lay = cnt + mx + 1, *start = lay, *ids = lay + ng + 1, *rows = ids + ng;
    int u = 0, at = 0;
    for (int32_t v = 0; v <= mx; v++)
        if (cnt[v]) {
            start[u] = at, ids[u] = v;
            at += cnt[v];
            cnt[v] = start[u++]; // now the next free slot of v
        }
    start[ng] = at;
    for (int i = 0; i < N; i++) rows[cnt[inp[i]]++] = i;
    const size_t len = (size_t)ng + 1 + (size_t)ng + (size_t)N;
    if (!grow(cu, (void **)&cu->grp, &cu->grp_ints, len, sizeof(int32_t))) return -1;
    note(cu, cudaMemcpyAsync(cu->grp, lay, len * sizeof(int32_t), cudaMemcpyHostToDevice, cu->s));
    note(cu, cudaStreamSynchronize(cu->s)); // lay is reused by the next call
    return ng;
}

extern "C" void mw_cuda_encoder_forward(mw_cuda *cu, float *out, const int32_t *inp, const float *wte,
                                        const float *wpe, int B, int T, int C) {
    long n = (long)B * T * C;
    k_encoder_fwd<<<blocks(n, 256), 256, 0, cu->s>>>(out, inp, wte, wpe, (long)B * T, T, C);
    LAUNCHED(cu);
}

extern "C" void mw_cuda_embedding_forward(mw_cuda *cu, float *out, const int32_t *inp, const float *table, int N,
                                          int C) {
    k_encoder_fwd<<<blocks((long)N * C, 256), 256, 0, cu->s>>>(out, inp, table, NULL, N, 1, C);
    LAUNCHED(cu);
}

extern "C" void mw_cuda_embedding_backward(mw_cuda *cu, float *dtable, const float *dout, const int32_t *inp_host,
                                           int N, int C) {
    int ng = group_rows(cu, inp_host, N);
    if (ng < 0) note(cu, cudaErrorMemoryAllocation); // reported by mw_cuda_sync, never skipped silently
    if (ng <= 0) return;
    dim3 g((unsigned)ng, blocks(C, 128));
    k_group_sum<<<g, 128, 0, cu->s>>>(dtable, dout, cu->grp, ng, C);
    LAUNCHED(cu);
}

extern "C" void mw_cuda_encoder_backward(mw_cuda *cu, float *dwte, float *dwpe, const float *dout,
                                         const int32_t *inp_host, int B, int T, int C) {
    mw_cuda_embedding_backward(cu, dwte, dout, inp_host, B * T, C);
    k_wpe_sum<<<blocks((long)T * C, 256), 256, 0, cu->s>>>(dwpe, dout, B, T, C);
    LAUNCHED(cu);
}

// ---- column sums in fixed chunks of rows (parameter gradients) ---------------------------------

// part[k*C + c] = sum over rows of chunk k of f(row, c); kind 0: dout (db); 1: LayerNorm's dw
// ((x - mean) * rstd * d); 2: RMSNorm's dw (d * (x * rstd))
__global__ void k_colsum_part(float *part, const float *d, const float *x, const float *mean, const float *rstd,
                              int N, int C, int kind) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, k = blockIdx.x; // chunks on x: any number of rows
    if (c >= C) return;
    int n0 = k * MW_CUDA_ROWS, n1 = n0 + MW_CUDA_ROWS < N ? n0 + MW_CUDA_ROWS : N;
    float acc = 0.0f;
    for (int n = n0; n < n1; n++) {
        float v = d[(long)n * C + c];
        if (kind == 1) v = (x[(long)n * C + c] - mean[n]) * rstd[n] * v;
        if (kind == 2) v = v * (x[(long)n * C + c] * rstd[n]);
        acc += v;
    }
    part[(long)k * C + c] = acc;
}

__global__ void k_colsum_final(float *dst, const float *part, int chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = 0; k < chunks; k++) acc += part[(long)k * C + c];
    dst[c] += acc;
}

static void colsum(mw_cuda *cu, float *dst, const float *d, const float *x, const float *mean, const float *rstd, int N,
                   int C, int kind) {
    int chunks = (N + MW_CUDA_ROWS - 1) / MW_CUDA_ROWS;
    if (!grow(cu, (void **)&cu->part, &cu->part_floats, (size_t)chunks * C, sizeof(float))) return;
    dim3 g((unsigned)chunks, blocks(C, 128));
    k_colsum_part<<<g, 128, 0, cu->s>>>(cu->part, d, x, mean, rstd, N, C, kind);
    k_colsum_final<<<blocks(C, 128), 128, 0, cu->s>>>(dst, cu->part, chunks, C);
    LAUNCHED(cu);
}

// ---- LayerNorm and RMSNorm: a warp per row --------------------------------------------------------

__global__ void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (long)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    float m = warp_sum(s) / C, v = 0.0f;
    for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    float *o = out + (long)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) mean[row] = m, rstd[row] = r;
}

__global__ void k_layernorm_bwd(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (long)row * C, *d = dout + (long)row * C;
    float *di = dinp + (long)row * C, m = mean[row], s = rstd[row], dm = 0.0f, dnm = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = w[c] * d[c];
        dm += dn;
        dnm += dn * (x[c] - m) * s;
    }
    dm = warp_sum(dm) / C;
    dnm = warp_sum(dnm) / C;
    for (int c = lane; c < C; c += 32) di[c] += (w[c] * d[c] - dm - (x[c] - m) * s * dnm) * s;
}

__global__ void k_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (long)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    float s = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
    float *o = out + (long)row * C;
    for (int c = lane; c < C; c += 32) o[c] = w[c] * (x[c] * s);
    if (lane == 0) rstd[row] = s;
}

__global__ void k_rmsnorm_bwd(float *dinp, const float *dout, const float *inp, const float *w, const float *rstd,
                              int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (long)row * C, *d = dout + (long)row * C;
    float *di = dinp + (long)row * C, s = rstd[row], dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += w[c] * d[c] * x[c];
    float k = warp_sum(dot) * s * s * s / (float)C;
    for (int c = lane; c < C; c += 32) di[c] += w[c] * d[c] * s - x[c] * k;
}

extern "C" void mw_cuda_layernorm_forward(mw_cuda *cu, float *out, float *mean, float *rstd, const float *inp,
                                          const float *w, const float *b, int N, int C) {
    k_layernorm_fwd<<<blocks(N, 4), 128, 0, cu->s>>>(out, mean, rstd, inp, w, b, N, C);
    LAUNCHED(cu);
}

extern "C" void mw_cuda_layernorm_backward_acc(mw_cuda *cu, float *dinp, float *dw, float *db, const float *dout,
                                               const float *inp, const float *w, const float *mean,
                                               const float *rstd, int N, int C) {
    k_layernorm_bwd<<<blocks(N, 4), 128, 0, cu->s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    LAUNCHED(cu);
    colsum(cu, dw, dout, inp, mean, rstd, N, C, 1);
    colsum(cu, db, dout, NULL, NULL, NULL, N, C, 0);
}

extern "C" void mw_cuda_rmsnorm_forward(mw_cuda *cu, float *out, float *rstd, const float *inp, const float *w,
                                        int N, int C, float eps) {
    k_rmsnorm_fwd<<<blocks(N, 4), 128, 0, cu->s>>>(out, rstd, inp, w, N, C, eps);
    LAUNCHED(cu);
}

extern "C" void mw_cuda_rmsnorm_backward_acc(mw_cuda *cu, float *dinp, float *dw, const float *dout,
                                             const float *inp, const float *w, const float *rstd, int N, int C) {
    k_rmsnorm_bwd<<<blocks(N, 4), 128, 0, cu->s>>>(dinp, dout, inp, w, rstd, N, C);
    LAUNCHED(cu);
    colsum(cu, dw, dout, inp, NULL, rstd, N, C, 2);
}

// ---- matmul: cuBLAS, row-major through column-major transposes -----------------------------------

__global__ void k_add_bias(float *out, const float *bias, long N, int OC) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < N * OC) out[i] += bias[i % OC];
}

extern "C" void mw_cuda_matmul_forward(mw_cuda *cu, float *out, const float *inp, const float *w, const float *bias,
                                       int N, int C, int OC, int acc) {
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    // out^T (OC,N) = w (OC,C) . inp^T (C,N): column-major A = w^T stored (C,OC), B = inp^T (C,N)
    if (cublasSgemm(cu->h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, C, inp, C, &beta, out, OC) !=
        CUBLAS_STATUS_SUCCESS)
        note(cu, cudaErrorUnknown);
    if (bias) {
        k_add_bias<<<blocks((long)N * OC, 256), 256, 0, cu->s>>>(out, bias, N, OC);
        LAUNCHED(cu);
    }
}

extern "C" void mw_cuda_matmul_backward(mw_cuda *cu, float *dinp, float *dw, float *db, const float *dout,
                                        const float *inp, const float *w, int N, int C, int OC, int acc_dinp) {
    const float one = 1.0f, beta = acc_dinp ? 1.0f : 0.0f;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (dinp) // dinp^T (C,N) = w^T (C,OC) . dout^T (OC,N)
        st = cublasSgemm(cu->h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w, C, dout, OC, &beta, dinp, C);
    if (st == CUBLAS_STATUS_SUCCESS) // dw^T (C,OC) += inp^T (C,N) . dout (N,OC)
        st = cublasSgemm(cu->h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one, dw, C);
    if (st != CUBLAS_STATUS_SUCCESS) note(cu, cudaErrorUnknown);
    if (db) colsum(cu, db, dout, NULL, NULL, NULL, N, OC, 0);
}

// ---- attention: a warp per query row (forward, dq) or per key row (dk, dv) ------------------------
// Lane l holds dimensions l, l + 32, ... of a row (hs / 32 of them, at most 8).

#define MAXK 8

extern "C" int mw_cuda_attention_ok(int hs) { return hs > 0 && hs % 32 == 0 && hs / 32 <= MAXK; }

__global__ void k_attn_fwd(float *out, float *lse, const float *qkv, int B, int T, int H, int KV, int hs) {
    long wid = blockIdx.x * (long)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, K = hs / 32;
    if (wid >= (long)B * H * T) return;
    int i = (int)(wid % T), h = (int)(wid / T % H), b = (int)(wid / T / H), g = h / (H / KV);
    const long stride = (long)(H + 2 * KV) * hs;
    const float *base = qkv + (long)b * T * stride, *q = base + (long)i * stride + (long)h * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    float acc[MAXK], mx = -INFINITY, l = 0.0f;
    for (int k = 0; k < K; k++) acc[k] = 0.0f;
    for (int j0 = 0; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        float s = -INFINITY;
        if (j <= i) {
            const float *kr = base + (long)j * stride + (long)(H + g) * hs;
            float dot = 0.0f;
            for (int d = 0; d < hs; d++) dot += q[d] * kr[d];
            s = dot * scale;
        }
        float m2 = fmaxf(mx, warp_max(s)), f = expf(mx - m2), p = j <= i ? expf(s - m2) : 0.0f;
        l = l * f + warp_sum(p);
        for (int k = 0; k < K; k++) acc[k] *= f;
        int last = i - j0 < 31 ? i - j0 : 31;
        for (int jj = 0; jj <= last; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
            const float *vr = base + (long)(j0 + jj) * stride + (long)(H + KV + g) * hs;
            for (int k = 0; k < K; k++) acc[k] += pj * vr[lane + 32 * k];
        }
        mx = m2;
    }
    float *o = out + ((long)b * T + i) * (long)H * hs + (long)h * hs;
    for (int k = 0; k < K; k++) o[lane + 32 * k] = acc[k] / l;
    if (lane == 0) lse[((long)b * H + h) * T + i] = mx + logf(l);
}

// D (B,H,T) = rowsum(dout * out) per head
__global__ void k_attn_d(float *D, const float *dout, const float *out, int B, int T, int H, int hs) {
    long wid = blockIdx.x * (long)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (wid >= (long)B * H * T) return;
    int i = (int)(wid % T), h = (int)(wid / T % H), b = (int)(wid / T / H);
    long off = ((long)b * T + i) * (long)H * hs + (long)h * hs;
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32) s += dout[off + d] * out[off + d];
    s = warp_sum(s);
    if (lane == 0) D[((long)b * H + h) * T + i] = s;
}

__global__ void k_attn_dq(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *D, int B,
                          int T, int H, int KV, int hs) {
    long wid = blockIdx.x * (long)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, K = hs / 32;
    if (wid >= (long)B * H * T) return;
    int i = (int)(wid % T), h = (int)(wid / T % H), b = (int)(wid / T / H), g = h / (H / KV);
    const long stride = (long)(H + 2 * KV) * hs;
    const float *base = qkv + (long)b * T * stride, *q = base + (long)i * stride + (long)h * hs;
    const float *dy = dout + ((long)b * T + i) * (long)H * hs + (long)h * hs;
    const float scale = 1.0f / sqrtf((float)hs), L = lse[((long)b * H + h) * T + i], Di = D[((long)b * H + h) * T + i];
    float acc[MAXK];
    for (int k = 0; k < K; k++) acc[k] = 0.0f;
    for (int j0 = 0; j0 <= i; j0 += 32) {
        int j = j0 + lane;
        float ds = 0.0f;
        if (j <= i) {
            const float *kr = base + (long)j * stride + (long)(H + g) * hs;
            const float *vr = base + (long)j * stride + (long)(H + KV + g) * hs;
            float dot = 0.0f, dp = 0.0f;
            for (int d = 0; d < hs; d++) dot += q[d] * kr[d], dp += dy[d] * vr[d];
            float p = expf(dot * scale - L);
            ds = p * (dp - Di);
        }
        int last = i - j0 < 31 ? i - j0 : 31;
        for (int jj = 0; jj <= last; jj++) {
            float dsj = __shfl_sync(0xffffffffu, ds, jj);
            const float *kr = base + (long)(j0 + jj) * stride + (long)(H + g) * hs;
            for (int k = 0; k < K; k++) acc[k] += dsj * kr[lane + 32 * k];
        }
    }
    float *dq = dqkv + (long)b * T * stride + (long)i * stride + (long)h * hs;
    for (int k = 0; k < K; k++) dq[lane + 32 * k] = acc[k] * scale;
}

__global__ void k_attn_dkv(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *D, int B,
                           int T, int H, int KV, int hs) {
    long wid = blockIdx.x * (long)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, K = hs / 32;
    if (wid >= (long)B * KV * T) return;
    int j = (int)(wid % T), g = (int)(wid / T % KV), b = (int)(wid / T / KV), per = H / KV;
    const long stride = (long)(H + 2 * KV) * hs;
    const float *base = qkv + (long)b * T * stride;
    const float *kr = base + (long)j * stride + (long)(H + g) * hs, *vr = base + (long)j * stride + (long)(H + KV + g) * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    float dk[MAXK], dv[MAXK];
    for (int k = 0; k < K; k++) dk[k] = dv[k] = 0.0f;
    for (int h = g * per; h < (g + 1) * per; h++) { // the group's heads in order
        for (int i0 = j; i0 < T; i0 += 32) {
            int i = i0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (i < T) {
                const float *q = base + (long)i * stride + (long)h * hs;
                const float *dy = dout + ((long)b * T + i) * (long)H * hs + (long)h * hs;
                float dot = 0.0f, dp = 0.0f;
                for (int d = 0; d < hs; d++) dot += q[d] * kr[d], dp += dy[d] * vr[d];
                long r = ((long)b * H + h) * T + i;
                p = expf(dot * scale - lse[r]);
                ds = p * (dp - D[r]);
            }
            int last = T - 1 - i0 < 31 ? T - 1 - i0 : 31;
            for (int ii = 0; ii <= last; ii++) {
                float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
                const float *q = base + (long)(i0 + ii) * stride + (long)h * hs;
                const float *dy = dout + ((long)b * T + i0 + ii) * (long)H * hs + (long)h * hs;
                for (int k = 0; k < K; k++) {
                    dv[k] += pi * dy[lane + 32 * k];
                    dk[k] += dsi * q[lane + 32 * k];
                }
            }
        }
    }
    float *dkr = dqkv + (long)b * T * stride + (long)j * stride + (long)(H + g) * hs;
    float *dvr = dqkv + (long)b * T * stride + (long)j * stride + (long)(H + KV + g) * hs;
    for (int k = 0; k < K; k++) dkr[lane + 32 * k] = dk[k] * scale, dvr[lane + 32 * k] = dv[k];
}

extern "C" void mw_cuda_attention_forward(mw_cuda *cu, float *out, float *lse, const float *qkv, int B, int T, int H,
                                          int KV, int hs) {
    if (!mw_cuda_attention_ok(hs) || KV <= 0 || H % KV) {
        note(cu, cudaErrorInvalidValue);
        return;
    }
    k_attn_fwd<<<blocks((long)B * H * T, 4), 128, 0, cu->s>>>(out, lse, qkv, B, T, H, KV, hs);
    LAUNCHED(cu);
}

extern "C" void mw_cuda_attention_backward(mw_cuda *cu, float *dqkv, const float *dout, const float *qkv,
                                           const float *out, const float *lse, int B, int T, int H, int KV, int hs) {
    if (!mw_cuda_attention_ok(hs) || KV <= 0 || H % KV) {
        note(cu, cudaErrorInvalidValue);
        return;
    }
    if (!grow(cu, (void **)&cu->part, &cu->part_floats, (size_t)B * H * T, sizeof(float))) return;
    long rows = (long)B * H * T;
    k_attn_d<<<blocks(rows, 4), 128, 0, cu->s>>>(cu->part, dout, out, B, T, H, hs);
    k_attn_dq<<<blocks(rows, 4), 128, 0, cu->s>>>(dqkv, dout, qkv, lse, cu->part, B, T, H, KV, hs);
    k_attn_dkv<<<blocks((long)B * KV * T, 4), 128, 0, cu->s>>>(dqkv, dout, qkv, lse, cu->part, B, T, H, KV, hs);
    LAUNCHED(cu);
}

// ---- elementwise ---------------------------------------------------------------------------------

#define GELU_K 0.7978845608028654f

__global__ void k_gelu_fwd(float *out, const float *inp, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i], u = GELU_K * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
}

__global__ void k_gelu_bwd(float *dinp, const float *dout, const float *inp, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i], u = GELU_K * (x + 0.044715f * x * x * x), t = tanhf(u);
    float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 0.134145f * x * x);
    dinp[i] = dout[i] * g;
}

__global__ void k_swiglu_fwd(float *out, const float *gate, const float *up, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    out[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
}

__global__ void k_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i], u = up[i], s = 1.0f / (1.0f + expf(-g)), silu = g * s, d = dout[i];
    dgate[i] = d * u * (s + silu * (1.0f - s));
    dup[i] = d * silu;
}

__global__ void k_rope(float *x, long row_stride, const float *cos_t, const float *sin_t, long rows, int T, int H,
                       int D, float sign) {
    int h2 = D / 2;
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= rows * H * h2) return;
    long r = i / ((long)H * h2);
    int hd = (int)(i / h2 % H), k = (int)(i % h2);
    long t = r % T;
    float *v = x + r * row_stride + (long)hd * D;
    float c = cos_t[t * h2 + k], s = sign * sin_t[t * h2 + k], x1 = v[k], x2 = v[k + h2];
    v[k] = x1 * c - x2 * s;
    v[k + h2] = x2 * c + x1 * s;
}

extern "C" void mw_cuda_gelu_forward(mw_cuda *cu, float *out, const float *inp, long n) {
    k_gelu_fwd<<<blocks(n, 256), 256, 0, cu->s>>>(out, inp, n);
    LAUNCHED(cu);
}
extern "C" void mw_cuda_gelu_backward(mw_cuda *cu, float *dinp, const float *dout, const float *inp, long n) {
    k_gelu_bwd<<<blocks(n, 256), 256, 0, cu->s>>>(dinp, dout, inp, n);
    LAUNCHED(cu);
}
extern "C" void mw_cuda_swiglu_forward(mw_cuda *cu, float *out, const float *gate, const float *up, long n) {
    k_swiglu_fwd<<<blocks(n, 256), 256, 0, cu->s>>>(out, gate, up, n);
    LAUNCHED(cu);
}
extern "C" void mw_cuda_swiglu_backward(mw_cuda *cu, float *dgate, float *dup, const float *dout, const float *gate,
                                        const float *up, long n) {
    k_swiglu_bwd<<<blocks(n, 256), 256, 0, cu->s>>>(dgate, dup, dout, gate, up, n);
    LAUNCHED(cu);
}
extern "C" void mw_cuda_rope_forward(mw_cuda *cu, float *x, long row_stride, const float *cos_t, const float *sin_t,
                                     int B, int T, int H, int D) {
    long rows = (long)B * T;
    k_rope<<<blocks(rows * H * (D / 2), 256), 256, 0, cu->s>>>(x, row_stride, cos_t, sin_t, rows, T, H, D, 1.0f);
    LAUNCHED(cu);
}
extern "C" void mw_cuda_rope_backward(mw_cuda *cu, float *dx, long row_stride, const float *cos_t,
                                      const float *sin_t, int B, int T, int H, int D) {
    long rows = (long)B * T;
    k_rope<<<blocks(rows * H * (D / 2), 256), 256, 0, cu->s>>>(dx, row_stride, cos_t, sin_t, rows, T, H, D, -1.0f);
    LAUNCHED(cu);
}

// ---- cross-entropy: a block per row, tree reductions in a fixed order -----------------------------

__global__ void k_xent(float *logits, float *losses, const int32_t *targets, float dloss, int grad, int V) {
    __shared__ double sd[256];
    __shared__ float sf[256];
    int n = blockIdx.x, t = threadIdx.x;
    float *z = logits + (long)n * V;
    float mx = -INFINITY;
    for (int j = t; j < V; j += 256) mx = fmaxf(mx, z[j]);
    sf[t] = mx;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (t < o) sf[t] = fmaxf(sf[t], sf[t + o]);
        __syncthreads();
    }
    mx = sf[0];
    double a = 0.0;
    for (int j = t; j < V; j += 256) a += (double)expf(z[j] - mx);
    sd[t] = a;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (t < o) sd[t] += sd[t + o];
        __syncthreads();
    }
    double sum = sd[0];
    int tg = targets[n];
    float zt = z[tg];
    __syncthreads();
    if (t == 0) losses[n] = (float)(log(sum) - (double)(zt - mx));
    if (grad) {
        float c = (float)(dloss / sum);
        for (int j = t; j < V; j += 256) z[j] = expf(z[j] - mx) * c - (j == tg ? dloss : 0.0f);
    }
}

extern "C" void mw_cuda_crossentropy(mw_cuda *cu, float *logits, float *losses, const int32_t *targets, float dloss,
                                     int grad, int N, int V) {
    k_xent<<<(unsigned)N, 256, 0, cu->s>>>(logits, losses, targets, dloss, grad, V);
    LAUNCHED(cu);
}

// ---- AdamW ----------------------------------------------------------------------------------------

__global__ void k_adamw(float *p, float *g, float *m, float *v, long n, float decay, float b1, float b2, float a1,
                        float a2, float step, float bc2s, float eps, float gs) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] * gs, mi = m[i] * b1 + a1 * gi, vi = v[i] * b2 + a2 * gi * gi, pi = p[i] * decay;
    float denom = sqrtf(vi) / bc2s + eps;
    p[i] = pi - step * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    g[i] = 0.0f;
}

extern "C" void mw_cuda_adamw(mw_cuda *cu, float *p, float *g, float *m, float *v, size_t n, double lr, double beta1,
                              double beta2, double eps, double weight_decay, float grad_scale, int t) {
    // the constants as src/optim/adamw.c rounds them
    const float decay = (float)(1.0 - lr * weight_decay), b1 = (float)beta1, b2 = (float)beta2;
    const float a1 = (float)(1.0 - beta1), a2 = (float)(1.0 - beta2);
    const float step = (float)(lr / (1.0 - pow(beta1, t))), bc2s = (float)sqrt(1.0 - pow(beta2, t));
    k_adamw<<<blocks((long)n, 256), 256, 0, cu->s>>>(p, g, m, v, (long)n, decay, b1, b2, a1, a2, step, bc2s, (float)eps,
                                                     grad_scale);
    LAUNCHED(cu);
}
