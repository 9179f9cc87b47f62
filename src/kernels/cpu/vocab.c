/* Vocabulary-parallel kernels (vocab.h). */
#include "vocab.h"

#include <math.h>
#include <string.h>

#include "exp_fast.h"

void mw_vocab_embed_rows(float *out, const int32_t *inp, const float *table, int N, int C, int vlo, int vhi) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (long)n * C;
        if (inp[n] >= vlo && inp[n] < vhi)
            memcpy(o, table + (long)(inp[n] - vlo) * C, sizeof(float) * C);
        else
            memset(o, 0, sizeof(float) * C);
    }
}

void mw_vocab_embed_backward(float *dtable, const float *dout, const int32_t *inp, int N, int C, int vlo, int vhi) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int n = 0; n < N; n++) {
            if (inp[n] < vlo || inp[n] >= vhi) continue;
            const float *d = dout + (long)n * C;
            float *e = dtable + (long)(inp[n] - vlo) * C;
            for (int c = c0; c < c1; c++) e[c] += d[c];
        }
    }
}

void mw_vocab_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                               int C, int vlo, int vhi) {
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (long)bt * C;
            float *p = dwpe + (long)(bt % T) * C;
            const int mine = inp[bt] >= vlo && inp[bt] < vhi;
            float *e = mine ? dwte + (long)(inp[bt] - vlo) * C : NULL;
            for (int c = c0; c < c1; c++) {
                if (mine) e[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}

void mw_vocab_xent_max(const float *z, float *mx, int rows, int Vl, int nv) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        const float *r = z + (long)n * Vl;
        float m = -INFINITY;
        for (int j = 0; j < nv; j++) m = r[j] > m ? r[j] : m;
        mx[n] = m;
    }
}

void mw_vocab_xent_sums(float *z, const float *M, const int32_t *targets, double *st, int rows, int Vl, int nv,
                        int vlo, int grad) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        float *r = z + (long)n * Vl;
        const float mx = M[n];
        const int t = targets[n] - vlo;
        st[2 * n + 1] = t >= 0 && t < nv ? (double)r[t] : 0.0;
        double a[4] = {0, 0, 0, 0}; /* fixed lanes, as mw_crossentropy */
        int j = 0;
        if (grad) {
            for (j = 0; j < nv; j++) r[j] = exp_fast(r[j] - mx);
            for (j = 0; j + 4 <= nv; j += 4)
                for (int u = 0; u < 4; u++) a[u] += r[j + u];
            for (int u = 0; j < nv; j++, u++) a[u] += r[j];
        } else {
            for (j = 0; j + 4 <= nv; j += 4)
                for (int u = 0; u < 4; u++) a[u] += exp_fast(r[j + u] - mx);
            for (int u = 0; j < nv; j++, u++) a[u] += exp_fast(r[j] - mx);
        }
        st[2 * n] = (a[0] + a[1]) + (a[2] + a[3]);
    }
}

void mw_vocab_xent_finish(float *z, float *losses, const float *M, const double *st, const int32_t *targets,
                          float dloss, int grad, int rows, int Vl, int nv, int vlo) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        const double sum = st[2 * n];
        const float zt = (float)st[2 * n + 1];
        losses[n] = (float)(log(sum) - (double)(zt - M[n]));
        if (!grad) continue;
        float *r = z + (long)n * Vl;
        const float c = (float)(dloss / sum);
        int j = 0;
        for (; j < nv; j++) r[j] *= c;
        for (; j < Vl; j++) r[j] = 0.0f;
        const int t = targets[n] - vlo;
        if (t >= 0 && t < nv) r[t] -= dloss;
    }
}
