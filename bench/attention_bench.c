/* Tiled (IO-aware) attention against the plain one that stores the T x T probabilities: forward
 * and backward time, medians of interleaved runs, and the bytes each keeps between them.
 * Usage: build/attention_bench [--kv-heads KV] [threads] [B] [T...]. GPT-2 124M's heads: C=768,
 * H=12. With --kv-heads, the tiled kernel also runs grouped-query attention (12 query heads
 * sharing KV key/value heads, the fused layout of mw_attention_forward_gqa), timed beside MHA. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/kernels/cpu/ops.h"
#include "memwall.h"
#include "timing.h"

#define now bench_now
#define median bench_median

int main(int argc, char **argv) {
    const int C = 768, H = 12, hs = C / H, R = 7;
    int KV = 0, pos[10], np = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kv-heads") && i + 1 < argc) {
            KV = atoi(argv[++i]);
            if (KV < 1 || H % KV) {
                fprintf(stderr, "attention_bench: --kv-heads must divide %d\n", H);
                return 1;
            }
        } else if (np < 10) {
            pos[np++] = i;
        }
    }
    const int nt = mw_set_threads(np > 0 ? atoi(argv[pos[0]]) : 0), B = np > 1 ? atoi(argv[pos[1]]) : 1;
    int Ts[8] = {256, 1024, 2048}, nT = 3;
    if (np > 2) {
        nT = 0;
        for (int i = 2; i < np && nT < 8; i++) Ts[nT++] = atoi(argv[pos[i]]);
    }
    printf("attention, B=%d C=%d H=%d, %d threads, medians of %d interleaved runs\n", B, C, H, nt, R);
    printf("%6s | %10s %10s %7s | %10s %10s %7s | %14s %14s", "T", "plain fwd", "tiled fwd", "ratio",
           "plain bwd", "tiled bwd", "ratio", "plain keeps", "tiled keeps");
    if (KV) printf(" | %10s %7s %10s %7s", "gqa fwd", "vs mha", "gqa bwd", "vs mha");
    printf("\n");
    for (int ti = 0; ti < nT; ti++) {
        const int T = Ts[ti];
        const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, natt = (size_t)B * H * T * T;
        const size_t ng = KV ? (size_t)B * T * (H + 2 * KV) * hs : 1;
        float *qkv = malloc(nq * 4), *out = malloc(no * 4), *d = malloc(no * 4), *dq = malloc(nq * 4);
        float *att = malloc(natt * 4), *pscr = malloc((size_t)nt * T * T * 4);
        float *lse = malloc((size_t)B * H * T * 4), *scr = malloc((size_t)nt * mw_attention_scratch_floats(T) * 4);
        float *gqkv = malloc(ng * 4), *gdq = malloc(ng * 4);
        if (!qkv || !out || !d || !dq || !att || !pscr || !lse || !scr || !gqkv || !gdq) return 1;
        for (size_t i = 0; i < nq; i++) qkv[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < ng; i++) gqkv[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        for (size_t i = 0; i < no; i++) d[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
        double pf[R], tf[R], pb[R], tb[R], gf[R], gb[R];
        for (int r = -1; r < R; r++) { /* r = -1 warms up */
            double t0 = now();
            mw_attention_forward_plain(out, att, qkv, B, T, C, H);
            double t1 = now();
            mw_attention_backward_plain(dq, pscr, nt, d, qkv, att, B, T, C, H);
            double t2 = now();
            mw_attention_forward(out, lse, scr, nt, qkv, B, T, C, H);
            double t3 = now();
            mw_attention_backward(dq, scr, nt, d, qkv, out, lse, B, T, C, H);
            double t4 = now(), t5 = t4, t6 = t4;
            if (KV) {
                mw_attention_forward_gqa(out, lse, scr, nt, gqkv, B, T, H, KV, hs);
                t5 = now();
                mw_attention_backward_gqa(gdq, scr, nt, d, gqkv, out, lse, B, T, H, KV, hs);
                t6 = now();
            }
            if (r >= 0)
                pf[r] = t1 - t0, pb[r] = t2 - t1, tf[r] = t3 - t2, tb[r] = t4 - t3, gf[r] = t5 - t4,
                gb[r] = t6 - t5;
        }
        double mpf = median(pf, R), mtf = median(tf, R), mpb = median(pb, R), mtb = median(tb, R);
        printf("%6d | %8.1f ms %8.1f ms %6.2fx | %8.1f ms %8.1f ms %6.2fx | %11.1f MiB %11.2f MiB", T,
               mpf * 1e3, mtf * 1e3, mpf / mtf, mpb * 1e3, mtb * 1e3, mpb / mtb, natt * 4 / 1048576.0,
               (double)B * H * T * 4 / 1048576.0);
        if (KV) {
            double mgf = median(gf, R), mgb = median(gb, R);
            printf(" | %8.1f ms %6.2fx %8.1f ms %6.2fx", mgf * 1e3, mgf / mtf, mgb * 1e3, mgb / mtb);
        }
        printf("\n");
        free(qkv), free(out), free(d), free(dq), free(att), free(pscr), free(lse), free(scr);
        free(gqkv), free(gdq);
    }
    printf("(ratio = plain / tiled: above 1 the tiled one is faster; \"keeps\": bytes held from forward "
           "to backward besides q, k, v and the output");
    if (KV) printf("; vs mha = GQA time / MHA time, both with %d query heads: below 1 GQA is cheaper", H);
    printf(")\n");
    return 0;
}
