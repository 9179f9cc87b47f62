/* The activation quantiser (src/kernels/cpu/actq.c) against a scalar reference written here from
 * actq.h's definition, value by value (its own minimum/maximum loop, its own bit-by-bit packing, the
 * draw taken per global index i from mw_actq_draw, which the kernel computes group by group):
 * stored bytes and dequantised floats compared bit for bit on the same random numbers, at bits 1, 2,
 * 4, 8 and sizes that end in a partial group. Then thread invariance (1, 2, 3 threads), the edge
 * inputs (constant groups, inf/NaN refused with the first index, denormals, -0, ranges near FLT_MAX,
 * n = 0 and 1), nothing written past mw_actq_bytes, the error bound |x' - x| <= 1/scale, the 1-bit
 * store exact on masks, and unbiasedness over many streams (fixed seeds: it cannot flake). */
#include <float.h>
#include <math.h>
#include <omp.h>

#include "../src/core/rng.h"
#include "../src/kernels/cpu/actq.h"
#include "check.h"
#include "memwall.h"

#define GR MW_ACTQ_GROUP
#define GOLDEN 0xb15cc9ac729e0a97ull
static const int BITS[4] = {1, 2, 4, 8};

/* ---- the reference ------------------------------------------------------------------------- */

static size_t ref_groups(size_t n) { return (n + GR - 1) / GR; }

static size_t ref_bytes(size_t n, int bits) {
    size_t t = 0;
    for (size_t g = 0; g < ref_groups(n); g++) {
        const size_t m = n - g * GR < GR ? n - g * GR : GR;
        t += 2 * sizeof(float) + (m * (size_t)bits + 7) / 8;
    }
    return t;
}

/* GACT's formula at bits >= 2; the quarter form where scale < B * 2^-127 */
static int ref_code(float x, float mn, float scale, int bits, float u) {
    const float B = (float)((1 << bits) - 1);
    float v;
    if (scale < ldexpf(B, -127))
        v = (x / 4.0f - mn / 4.0f) * (scale * 4.0f);
    else
        v = (x - mn) * scale;
    float w = v + (u - 0.5f);
    if (!(w > 0.0f)) w = 0.0f;
    float q = nearbyintf(w);
    if (q > B) q = B;
    return (int)q;
}

static void ref_quantize(const float *x, size_t n, int bits, uint64_t seed, uint64_t stream, unsigned char *out) {
    memset(out, 0, ref_bytes(n, bits));
    unsigned char *codes = out + ref_groups(n) * 2 * sizeof(float);
    for (size_t g = 0; g < ref_groups(n); g++) {
        const size_t m = n - g * GR < GR ? n - g * GR : GR;
        const float *xg = x + g * GR;
        float mn = xg[0], mx = xg[0];
        for (size_t j = 1; j < m; j++) {
            if (xg[j] < mn) mn = xg[j];
            if (xg[j] > mx) mx = xg[j];
        }
        if (mn == 0.0f) mn = 0.0f; /* +0 */
        if (mx == 0.0f) mx = 0.0f;
        float par[2] = {mn, mx};
        if (bits > 1) par[1] = (float)((double)((1 << bits) - 1) / ((double)mx - (double)mn + 2e-6));
        memcpy(out + g * 8, par, 8);
        const size_t per = (m * (size_t)bits + 7) / 8;
        for (size_t j = 0; j < m; j++) {
            const float u = mw_actq_draw(seed, stream, g * GR + j);
            int q;
            if (bits == 1) {
                const float f = isinf(mx - mn) ? 0.25f : 1.0f;
                q = mx != mn && u < (xg[j] * f - mn * f) / (mx * f - mn * f);
            } else
                q = ref_code(xg[j], mn, par[1], bits, u);
            const size_t byte = j % per, shift = (size_t)bits * (j / per);
            for (int t = 0; t < bits; t++)
                if (q >> t & 1) codes[byte] |= (unsigned char)(1u << (shift + (size_t)t));
        }
        codes += per;
    }
}

static void ref_dequantize(const unsigned char *in, size_t n, int bits, float *x) {
    const unsigned char *codes = in + ref_groups(n) * 2 * sizeof(float);
    for (size_t g = 0; g < ref_groups(n); g++) {
        const size_t m = n - g * GR < GR ? n - g * GR : GR;
        float par[2];
        memcpy(par, in + g * 8, 8);
        const size_t per = (m * (size_t)bits + 7) / 8;
        for (size_t j = 0; j < m; j++) {
            const size_t byte = j % per, shift = (size_t)bits * (j / per);
            int q = 0;
            for (int t = 0; t < bits; t++) q |= (codes[byte] >> (shift + (size_t)t) & 1) << t;
            float v;
            if (bits == 1)
                v = q ? par[1] : par[0];
            else if (par[1] < ldexpf((float)((1 << bits) - 1), -127))
                v = 4.0f * ((float)q / (4.0f * par[1]) + par[0] / 4.0f);
            else
                v = (float)q / par[1] + par[0];
            x[g * GR + j] = v > FLT_MAX ? FLT_MAX : v;
        }
        codes += per;
    }
}

/* ---- inputs -------------------------------------------------------------------------------- */

/* n values of a mix of group kinds, chosen per group from the generator: normal, offset (a tiny
 * range far from 0), constant, denormal, signed zeros, huge (near +-FLT_MAX), a 0/1 mask, spiky */
static void fill(float *x, size_t n, uint64_t *s) {
    for (size_t g = 0; g < ref_groups(n); g++) {
        const size_t m = n - g * GR < GR ? n - g * GR : GR;
        float *xg = x + g * GR;
        const int kind = (int)mw_rng_below(s, 8);
        const float c = (float)mw_rng_normal(s);
        for (size_t j = 0; j < m; j++) {
            const float z = (float)mw_rng_normal(s);
            switch (kind) {
            case 0: xg[j] = z; break;
            case 1: xg[j] = 1e4f + 1e-3f * z; break;
            case 2: xg[j] = c; break;
            case 3: xg[j] = z * 1e-39f; break;
            case 4: xg[j] = mw_rng_below(s, 2) ? 0.0f : -0.0f; break;
            case 5: xg[j] = (z > 0 ? 1.0f : -1.0f) * FLT_MAX * (float)mw_rng_unit(s); break;
            case 6: xg[j] = (float)mw_rng_below(s, 2); break;
            default: xg[j] = z * (mw_rng_below(s, 50) ? 1.0f : 1e6f); break;
            }
        }
    }
}

static int same_bits(const float *a, const float *b, size_t n, size_t *at) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float))) {
            *at = i;
            return 0;
        }
    return 1;
}

/* quantises with guard bytes after mw_actq_bytes and checks they are untouched */
static mw_status quant_guarded(const float *x, size_t n, int bits, uint64_t seed, uint64_t stream,
                               unsigned char *dst, size_t *bad) {
    const size_t nb = mw_actq_bytes(n, bits);
    memset(dst + nb, 0xA5, 64);
    mw_status s = mw_actq_quantize(x, n, bits, seed, stream, dst, bad);
    for (int k = 0; k < 64; k++)
        CHECK(dst[nb + k] == 0xA5, "n=%zu bits=%d: byte %zu past the end written", n, bits, nb + (size_t)k);
    return s;
}

/* ---- checks -------------------------------------------------------------------------------- */

static void check_sizes(void) {
    CHECK(mw_actq_bytes(0, 4) == 0, "n=0");
    CHECK(mw_actq_bytes(1, 1) == 9, "n=1 bits=1: %zu", mw_actq_bytes(1, 1));
    CHECK(mw_actq_bytes(256, 4) == 8 + 128, "256x4: %zu", mw_actq_bytes(256, 4));
    CHECK(mw_actq_bytes(257, 2) == 16 + 65, "257x2: %zu", mw_actq_bytes(257, 2));
    CHECK(mw_actq_bytes(3, 8) == 11, "3x8");
    CHECK(mw_actq_bytes(256, 3) == 0 && mw_actq_bytes(256, 0) == 0 && mw_actq_bytes(256, 16) == 0, "bad bits");
    for (int b = 0; b < 4; b++)
        for (size_t n = 0; n < 1100; n += 7)
            CHECK(mw_actq_bytes(n, BITS[b]) == ref_bytes(n, BITS[b]), "bytes(%zu, %d)", n, BITS[b]);
    /* 8 bits: 1 + 8/256 bytes a value (0.258x of fp32); 4: 0.133x; 2: 0.0703x */
    CHECK(mw_actq_bytes(1 << 20, 8) == (1 << 20) + 8 * 4096, "8 bits: %zu", mw_actq_bytes(1 << 20, 8));
    float x[4] = {1, 2, 3, 4};
    unsigned char d[64];
    CHECK(mw_actq_quantize(x, 4, 3, 1, 1, d, NULL) == MW_ERR_ARG, "3 bits accepted");
    CHECK(strstr(mw_last_error(), "3 bits") != NULL, "message: %s", mw_last_error());
}

/* kernel == reference, bytes and floats, across sizes, bit widths and input kinds */
static void check_reference(void) {
    static const size_t sizes[] = {1, 2, 7, 255, 256, 257, 511, 1000, 64 * GR + 3, 70 * GR};
    uint64_t s = 12345;
    const size_t nmax = 70 * GR;
    float *x = malloc(nmax * sizeof(float)), *y = malloc(nmax * sizeof(float)), *yr = malloc(nmax * sizeof(float));
    unsigned char *d = malloc(nmax * 2 + 4096), *dr = malloc(nmax * 2 + 4096);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int b = 0; b < 4; b++) {
            const size_t n = sizes[k];
            const int bits = BITS[b];
            fill(x, n, &s);
            const uint64_t seed = mw_rng_next(&s), stream = k * 4 + (size_t)b;
            CHECK_OK(quant_guarded(x, n, bits, seed, stream, d, NULL));
            ref_quantize(x, n, bits, seed, stream, dr);
            const size_t nb = mw_actq_bytes(n, bits);
            size_t at = 0;
            while (at < nb && d[at] == dr[at]) at++;
            CHECK(at == nb, "n=%zu bits=%d: stored byte %zu of %zu: %02x, reference %02x", n, bits, at, nb,
                  at < nb ? d[at] : 0, at < nb ? dr[at] : 0);
            mw_actq_dequantize(d, n, bits, y);
            ref_dequantize(d, n, bits, yr);
            CHECK(same_bits(y, yr, n, &at), "n=%zu bits=%d: value %zu: %a, reference %a", n, bits, at, y[at], yr[at]);
        }
    free(x), free(y), free(yr), free(d), free(dr);
}

/* 1, 2 and 3 threads give the same bytes (the parallel path starts at 64 groups) */
static void check_threads(void) {
    const size_t n = 300 * GR + 77;
    float *x = malloc(n * sizeof(float)), *y1 = malloc(n * sizeof(float)), *y2 = malloc(n * sizeof(float));
    unsigned char *d1 = malloc(n * 2 + 4096), *d2 = malloc(n * 2 + 4096);
    uint64_t s = 99;
    fill(x, n, &s);
    x[n / 2] = NAN, x[n - 3] = INFINITY; /* the first bad index, wherever the threads split */
    for (int b = 0; b < 4; b++) {
        const int bits = BITS[b];
        size_t bad1 = 0, bad2 = 0;
        omp_set_num_threads(1);
        CHECK(mw_actq_quantize(x, n, bits, 7, 3, d1, &bad1) == MW_ERR_ARG && bad1 == n / 2, "bad at 1 thread: %zu",
              bad1);
        omp_set_num_threads(2);
        CHECK(mw_actq_quantize(x, n, bits, 7, 3, d1, &bad2) == MW_ERR_ARG && bad2 == n / 2, "bad at 2 threads: %zu",
              bad2);
    }
    fill(x, n, &s);
    for (int b = 0; b < 4; b++) {
        const int bits = BITS[b];
        const size_t nb = mw_actq_bytes(n, bits);
        omp_set_num_threads(1);
        CHECK_OK(mw_actq_quantize(x, n, bits, 7, 3, d1, NULL));
        mw_actq_dequantize(d1, n, bits, y1);
        for (int t = 2; t <= 3; t++) {
            omp_set_num_threads(t);
            memset(d2, 0, nb);
            CHECK_OK(mw_actq_quantize(x, n, bits, 7, 3, d2, NULL));
            CHECK(!memcmp(d1, d2, nb), "bits=%d: %d threads store other bytes than 1", bits, t);
            mw_actq_dequantize(d2, n, bits, y2);
            size_t at = 0;
            CHECK(same_bits(y1, y2, n, &at), "bits=%d: %d threads dequantise value %zu to %a, 1 thread %a", bits, t,
                  at, y2[at], y1[at]);
        }
        /* another stream or seed draws other numbers */
        CHECK_OK(mw_actq_quantize(x, n, bits, 7, 4, d2, NULL));
        CHECK(bits == 1 || memcmp(d1, d2, nb), "bits=%d: stream 4 stores the bytes of stream 3", bits);
    }
    omp_set_num_threads(2);
    free(x), free(y1), free(y2), free(d1), free(d2);
}

/* round trip of x (n) at bits: the error bound per value, and the stored params for the caller */
static void round_trip(const float *x, size_t n, int bits, float *y, const char *what) {
    unsigned char *d = malloc(mw_actq_bytes(n, bits) + 64);
    CHECK_OK(quant_guarded(x, n, bits, 5, 6, d, NULL));
    mw_actq_dequantize(d, n, bits, y);
    for (size_t i = 0; i < n; i++) {
        float par[2];
        memcpy(par, d + (i / GR) * 8, 8);
        CHECK(isfinite(y[i]), "%s bits=%d: value %zu comes back as %a", what, bits, i, y[i]);
        double err = fabs((double)y[i] - x[i]), lim;
        if (bits == 1)
            lim = (double)par[1] - par[0];
        else /* 1/scale, and float rounding: 2^-14 of a step, 4 ulps of the largest magnitude */
            lim = (1 + 0x1p-14) / par[1] + 0x1p-22 * fmax(fabs(x[i]), fmax(fabs(par[0]), fabs(y[i])));
        CHECK(err <= lim, "%s bits=%d: value %zu: |%a - %a| = %g > %g", what, bits, i, y[i], x[i], err, lim);
    }
    free(d);
}

static void check_edges(void) {
    enum { N = 3 * GR + 11 };
    float x[N], y[N];
    unsigned char d[N * 2 + 4096];
    for (int b = 0; b < 4; b++) {
        const int bits = BITS[b];
        /* constant groups come back exactly, denormal ones too */
        const float cs[] = {0.0f, 1.5f, -3e38f, 1e-41f, -7.25e-3f, FLT_MAX};
        for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
            for (int i = 0; i < N; i++) x[i] = cs[k];
            round_trip(x, N, bits, y, "constant");
            size_t at = 0;
            CHECK(same_bits(x, y, N, &at), "bits=%d: constant %a comes back as %a", bits, cs[k], y[at]);
        }
        /* -0 comes back as a zero (+0) */
        for (int i = 0; i < N; i++) x[i] = i % 3 ? -0.0f : 0.0f;
        round_trip(x, N, bits, y, "signed zeros");
        for (int i = 0; i < N; i++) CHECK(y[i] == 0.0f, "bits=%d: -0 comes back as %a", bits, y[i]);
        for (int i = 0; i < N; i++) x[i] = -0.0f;
        round_trip(x, N, bits, y, "-0");
        /* denormals, and denormals beside normal values */
        uint64_t s = 3;
        for (int i = 0; i < N; i++) x[i] = (float)mw_rng_normal(&s) * 1e-40f;
        round_trip(x, N, bits, y, "denormals");
        for (int i = 0; i < N; i++) x[i] = i % 2 ? (float)mw_rng_normal(&s) * 1e-40f : (float)mw_rng_normal(&s);
        round_trip(x, N, bits, y, "denormals and normals");
        /* ranges past FLT_MAX: (x - min) would overflow; no inf comes back, the bound holds */
        for (int i = 0; i < N; i++) x[i] = (i % 2 ? 1 : -1) * FLT_MAX * (float)mw_rng_unit(&s);
        x[0] = FLT_MAX, x[1] = -FLT_MAX, x[GR] = 3e38f, x[GR + 1] = -3e38f;
        round_trip(x, N, bits, y, "huge range");
        CHECK(y[0] == FLT_MAX || bits > 1, "bits=%d: FLT_MAX comes back as %a", bits, y[0]);
        for (int i = 0; i < N; i++) x[i] = (float)mw_rng_unit(&s) * 3e38f;
        x[5] = 1e-40f; /* a denormal minimum in a range past 2^127 */
        round_trip(x, N, bits, y, "positive huge range");
        for (int i = 0; i < N; i++) x[i] = 2e38f + (float)mw_rng_unit(&s) * 1e38f;
        round_trip(x, N, bits, y, "values near FLT_MAX");
        /* n = 1 and n = 0 */
        x[0] = 2.5f;
        round_trip(x, 1, bits, y, "n=1");
        CHECK(y[0] == 2.5f, "bits=%d: n=1 gives %a", bits, y[0]);
        memset(d, 0x5A, 64);
        CHECK_OK(mw_actq_quantize(NULL, 0, bits, 1, 1, NULL, NULL));
        CHECK_OK(mw_actq_quantize(x, 0, bits, 1, 1, d, NULL));
        CHECK(d[0] == 0x5A && d[63] == 0x5A, "n=0 wrote");
        y[0] = 9.0f;
        mw_actq_dequantize(d, 0, bits, y);
        CHECK(y[0] == 9.0f, "n=0 dequantised");
        /* inf and NaN: refused, the first index named */
        for (int i = 0; i < N; i++) x[i] = (float)i;
        const struct {
            size_t at;
            float v;
            const char *word;
        } bads[] = {{0, NAN, "NaN"}, {300, INFINITY, "+inf"}, {N - 1, -INFINITY, "-inf"}};
        for (int k = 0; k < 3; k++) {
            x[bads[k].at] = bads[k].v;
            size_t bad = 12345;
            CHECK(quant_guarded(x, N, bits, 1, 1, d, &bad) == MW_ERR_ARG, "bits=%d: %s accepted", bits, bads[k].word);
            CHECK(bad == bads[0].at, "bits=%d: first bad index %zu, not %zu", bits, bad, bads[0].at);
            if (k == 0) {
                char want[64];
                snprintf(want, sizeof want, "value %zu of %d is NaN", bads[k].at, N);
                CHECK(strstr(mw_last_error(), want) != NULL, "message: %s", mw_last_error());
            }
        }
        x[0] = 0, x[300] = 0;
        size_t bad = 0;
        CHECK(mw_actq_quantize(x, N, bits, 1, 1, d, &bad) == MW_ERR_ARG && bad == N - 1, "-inf at the end: %zu", bad);
        CHECK(strstr(mw_last_error(), "-inf") != NULL, "message: %s", mw_last_error());
        CHECK(mw_actq_quantize(x, N, bits, 1, 1, d, NULL) == MW_ERR_ARG, "bad = NULL");
    }
}

/* the 1-bit store keeps masks exactly: 0/1, sign, ReLU-like {0, c}, and constant groups */
static void check_masks(void) {
    enum { N = 5 * GR + 100 };
    float x[N], y[N];
    uint64_t s = 11;
    const float lo[] = {0.0f, -1.0f, 0.0f, -2.5e-3f}, hi[] = {1.0f, 1.0f, 3.75f, 1e30f};
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < N; i++) x[i] = mw_rng_below(&s, 2) ? hi[k] : lo[k];
        for (int i = 2 * GR; i < 3 * GR; i++) x[i] = hi[k]; /* a group of one value */
        round_trip(x, N, 1, y, "mask");
        size_t at = 0;
        CHECK(same_bits(x, y, N, &at), "mask {%g, %g}: value %zu %a comes back as %a", lo[k], hi[k], at, x[at], y[at]);
    }
    CHECK(mw_actq_bytes(N, 1) <= N / 8 + 8 * 6 + 1, "mask bytes: %zu", mw_actq_bytes(N, 1));
}

/* Stochastic rounding is unbiased: over 2000 streams, each value's mean error is within 0.1 of a
 * step (its standard error is at most 0.5/sqrt(2000) = 0.011 steps), and the mean over all values
 * within 0.005 (standard error <= 0.0007). Round to nearest fails both: its error is a fixed
 * fraction of a step per value, up to 0.5. */
static void check_unbiased(void) {
    enum { N = GR, S = 2000 };
    float x[N], y[N];
    double sum[N] = {0};
    unsigned char d[GR * 2 + 64];
    uint64_t s = 2024;
    for (int i = 0; i < N; i++) x[i] = (float)mw_rng_normal(&s);
    x[0] = -4.0f, x[1] = 4.0f; /* the range */
    for (int b = 1; b < 4; b++) {
        const int bits = BITS[b];
        memset(sum, 0, sizeof sum);
        float par[2];
        for (int t = 0; t < S; t++) {
            CHECK_OK(mw_actq_quantize(x, N, bits, 77, (uint64_t)t, d, NULL));
            mw_actq_dequantize(d, N, bits, y);
            for (int i = 0; i < N; i++) sum[i] += (double)y[i] - x[i];
        }
        memcpy(par, d, 8);
        const double step = 1.0 / par[1];
        double all = 0, worst = 0;
        for (int i = 0; i < N; i++) {
            const double m = sum[i] / S / step;
            all += m;
            worst = fmax(worst, fabs(m));
        }
        all /= N;
        CHECK(worst < 0.1, "bits=%d: a value's mean error is %.4f steps", bits, worst);
        CHECK(fabs(all) < 0.005, "bits=%d: mean error over all values %.5f steps", bits, all);
        printf("test_actq: %d bits, %d streams: the worst value's mean error %.4f steps, all values' %+.5f\n", bits, S,
               worst, all);
    }
    /* the draws themselves: mean 1/2, variance 1/12 over 2^20 indices */
    double m1 = 0, m2 = 0;
    const int K = 1 << 20;
    for (int i = 0; i < K; i++) {
        const double u = mw_actq_draw(5, 9, (size_t)i);
        CHECK(u >= 0 && u < 1, "draw %d: %g", i, u);
        m1 += u, m2 += u * u;
    }
    m1 /= K, m2 = m2 / K - m1 * m1;
    CHECK(fabs(m1 - 0.5) < 0.002 && fabs(m2 - 1.0 / 12) < 0.001, "draws: mean %g variance %g", m1, m2);
}

/* The top code stays in range: where (mx - mn) * scale rounds above B, a draw near 1 takes
 * v + u - 0.5 past B + 0.5, and rint gives B + 1 (stored in 8 bits: 0) unless clamped. Finds such
 * a group [0, mx] and a stream whose draw for value 1 does it, from the reference's arithmetic. */
static void check_top_code(void) {
    for (int b = 1; b < 4; b++) {
        const int bits = BITS[b];
        const float B = (float)((1 << bits) - 1);
        float mx = 0, over = 0;
        for (int k = 1; k < 100000 && over <= 0; k++) {
            mx = 1000.0f + (float)k * 0.37f;
            const float scale = (float)((double)B / ((double)mx + 2e-6));
            over = mx * scale - B;
        }
        CHECK(over > 0, "bits=%d: no group found whose maximum maps past B", bits);
        long t = 0;
        while (t < (1L << 24) && mw_actq_draw(1, (uint64_t)t, 1) < B + 1.0f - (B + over)) t++;
        CHECK(t < (1L << 24), "bits=%d: no stream found", bits);
        float x[2] = {0.0f, mx}, y[2];
        unsigned char d[64], dr[64];
        CHECK_OK(mw_actq_quantize(x, 2, bits, 1, (uint64_t)t, d, NULL));
        ref_quantize(x, 2, bits, 1, (uint64_t)t, dr);
        CHECK(!memcmp(d, dr, mw_actq_bytes(2, bits)), "bits=%d: top code differs from the reference", bits);
        mw_actq_dequantize(d, 2, bits, y);
        CHECK(fabsf(y[1] - mx) <= mx / B, "bits=%d: the maximum %g comes back as %g", bits, mx, y[1]);
    }
}

/* The stored bytes and the floats that come back, as one FNV-1a digest over inputs made without
 * libm (integers from splitmix64, scaled by powers of two): the same on every CPU and compiler.
 * The digest was computed with gcc for x86-64-v3 and is the same from clang, from gcc for x86-64
 * (SSE2) and x86-64-v4 (AVX-512), and from aarch64-linux-gnu-gcc under qemu-aarch64, where make
 * test-aarch64 runs this test. A change of the format or the arithmetic changes it: then say so. */
static void check_golden(void) {
    const size_t n = 40 * GR + 33;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    unsigned char *d = malloc(n * 2 + 4096);
    uint64_t s = 2718281828, h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        const int32_t z = (int32_t)(mw_rng_next(&s) >> 40) - (1 << 23); /* |z| < 2^23 */
        switch ((i / GR) % 5) {
        case 0: x[i] = ldexpf((float)z, -21); break;         /* within +-4 */
        case 1: x[i] = ldexpf((float)z, -149 + 3); break;    /* denormals */
        case 2: x[i] = ldexpf((float)z, 127 - 23 + 1); break; /* up to +-FLT_MAX */
        case 3: x[i] = 1e4f + ldexpf((float)z, -33); break;  /* a tiny range far from 0 */
        default: x[i] = (float)(z > 0); break;               /* a 0/1 mask */
        }
    }
    for (int b = 0; b < 4; b++) {
        CHECK_OK(mw_actq_quantize(x, n, BITS[b], 3, 4, d, NULL));
        mw_actq_dequantize(d, n, BITS[b], y);
        const size_t nb = mw_actq_bytes(n, BITS[b]);
        for (size_t i = 0; i < nb; i++) h = (h ^ d[i]) * 1099511628211ull;
        for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ ((unsigned char *)y)[i]) * 1099511628211ull;
    }
    CHECK(h == GOLDEN, "digest %016llx, expected %016llx", (unsigned long long)h, (unsigned long long)GOLDEN);
    free(x), free(y), free(d);
}

int main(void) {
    check_sizes();
    check_reference();
    check_threads();
    check_edges();
    check_masks();
    check_unbiased();
    check_top_code();
    check_golden();
    if (check_failures) {
        fprintf(stderr, "test_actq: %d failures\n", check_failures);
        return 1;
    }
    printf("test_actq: all checks passed\n");
    return 0;
}
