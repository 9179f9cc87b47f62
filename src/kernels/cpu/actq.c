/* The activation quantiser (actq.h): GACT's per-group quantiser with stochastic rounding and the
 * 1-bit mask store. One group is the unit of work: its minimum and maximum, then its codes, each a
 * plain loop over the group that gcc and clang vectorise (8 lanes with AVX2) and that gives the
 * same bits as a scalar loop: every lane does the same IEEE operations in the same order, and
 * rintf, min and max are exact. OpenMP splits the groups; nothing crosses a group boundary. */
#include "actq.h"

#include "../../core/status.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define G MW_ACTQ_GROUP

/* groups below this many run on the calling thread (a fork costs more than they do) */
#define PAR_GROUPS 64

size_t mw_actq_bytes(size_t n, int bits) {
    if (bits != 1 && bits != 2 && bits != 4 && bits != 8) return 0;
    const size_t groups = n / G + (n % G != 0);
    /* ceil(n * bits / 8) without overflowing n * bits */
    return groups * 2 * sizeof(float) + (n / 8) * (size_t)bits + ((n % 8) * (size_t)bits + 7) / 8;
}

/* splitmix64's finaliser */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A bijective 32-bit hash (Wellons' lowbias32): 32-bit multiplies, so it vectorises. */
static inline uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* The draw of value j of group g is 24 bits of hash32(key(g) + j * golden), key(g) the low word
 * of a splitmix64 output over g from a state made of (seed, stream): a pure function of (seed,
 * stream, i = g * G + j), distinct for the G values of a group (hash32 is a bijection). */
static inline uint64_t stream_state(uint64_t seed, uint64_t stream) {
    return mix64(seed ^ 0x6A09E667F3BCC909ull) ^ mix64(stream ^ 0xBB67AE8584CAA73Bull);
}
static inline uint32_t group_key(uint64_t state, size_t g) {
    return (uint32_t)mix64(state + ((uint64_t)g + 1) * 0x9E3779B97F4A7C15ull);
}
#define U_STEP 0x9E3779B9u
#define U_UNIT (1.0f / 16777216.0f) /* 2^-24 */

float mw_actq_draw(uint64_t seed, uint64_t stream, size_t i) {
    const uint32_t key = group_key(stream_state(seed, stream), i / G);
    return (float)(hash32(key + (uint32_t)(i % G) * U_STEP) >> 8) * U_UNIT;
}

/* B * 2^-127: a scale below it means a range past 2^127, done in quarters (actq.h) */
static inline float huge_scale(int bits) { return (float)((1 << bits) - 1) * 0x1p-127f; }

/* A float's bits as an int32 ordered as the floats are (-0 just below +0), and back: the
 * minimum and maximum as integer min/max, which vectorise (float compares of the same meaning
 * do not, unless NaN and the sign of zero are waived). */
static inline int32_t order_key(uint32_t b) { return (int32_t)(b ^ ((0u - (b >> 31)) >> 1)); }
static inline float from_key(int32_t k) {
    const uint32_t b = order_key((uint32_t)k);
    float v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* The group's minimum and maximum (a zero stored as +0); -1 when all m values are finite, else the
 * index of the first that is not. */
static long group_range(const float *x, int m, float *mn_out, float *mx_out) {
    int32_t mn = INT32_MAX, mx = INT32_MIN;
    uint32_t bad = 0;
    for (int j = 0; j < m; j++) {
        uint32_t b;
        memcpy(&b, x + j, sizeof b);
        const int32_t k = order_key(b);
        mn = k < mn ? k : mn;
        mx = k > mx ? k : mx;
        bad |= (b & 0x7f800000u) == 0x7f800000u;
    }
    if (bad)
        for (int j = 0; j < m; j++)
            if (!isfinite(x[j])) return j;
    /* -0 + 0 = +0: a group's zero bound is stored as +0 */
    *mn_out = from_key(mn) + 0.0f;
    *mx_out = from_key(mx) + 0.0f;
    return -1;
}

/* Packs m codes of bits each into ceil(m * bits / 8) bytes (the planar layout of actq.h). */
static void pack(unsigned char *out, const unsigned char *c, int m, int bits) {
    const int k = 8 / bits, per = (m + k - 1) / k;
    memset(out, 0, (size_t)per);
    for (int t = 0; t < k; t++) {
        const int lim = m - t * per < per ? m - t * per : per;
        const unsigned char *ct = c + t * per;
        for (int i = 0; i < lim; i++) out[i] |= (unsigned char)(ct[i] << (bits * t));
    }
}

static void unpack(unsigned char *c, const unsigned char *in, int m, int bits) {
    const int k = 8 / bits, per = (m + k - 1) / k;
    const unsigned mask = (1u << bits) - 1;
    for (int t = 0; t < k; t++) {
        const int lim = m - t * per < per ? m - t * per : per;
        unsigned char *ct = c + t * per;
        for (int i = 0; i < lim; i++) ct[i] = (unsigned char)((in[i] >> (bits * t)) & mask);
    }
}

/* GACT's code of value j of a group (actq.h), with f = 1 or 1/4, lo = mn * f, sf = scale / f */
static inline unsigned char code_of(float x, uint32_t key, int j, float f, float lo, float sf, float Bf) {
    const float r = (float)(hash32(key + (uint32_t)j * U_STEP) >> 8) * U_UNIT - 0.5f;
    float w = (x * f - lo) * sf + r;
    w = w > 0.0f ? w : 0.0f;
    float q = rintf(w);
    q = q < Bf ? q : Bf;
    return (unsigned char)(int)q;
}

/* A whole group at 4 or 2 bits (bits a constant where it is called), its codes packed as they are
 * made: byte i holds the codes of values i, i + per, ... */
static inline __attribute__((always_inline)) void quant_full_packed(const float *x, int bits, uint32_t key, float f,
                                                                    float lo, float sf, float Bf, unsigned char *out) {
    const int k = 8 / bits, per = G / k;
    for (int i = 0; i < per; i++) {
        unsigned acc = 0;
        for (int t = 0; t < k; t++)
            acc |= (unsigned)code_of(x[t * per + i], key, t * per + i, f, lo, sf, Bf) << (bits * t);
        out[i] = (unsigned char)acc;
    }
}

static inline __attribute__((always_inline)) void dequant_full_packed(const unsigned char *in, int bits, float sf,
                                                                      float lo, float up, float *x) {
    const int k = 8 / bits, per = G / k;
    const unsigned mask = (1u << bits) - 1;
    for (int t = 0; t < k; t++)
        for (int i = 0; i < per; i++) {
            const float v = ((float)(in[i] >> (bits * t) & mask) / sf + lo) * up;
            x[t * per + i] = v < FLT_MAX ? v : FLT_MAX;
        }
}

/* Quantises one group of m values (finite) into its parameters par and its codes out. */
static void group_quantize(const float *x, int m, int bits, uint32_t key, float mn, float mx, unsigned char *par,
                           unsigned char *out) {
    unsigned char c[G];
    float p[2];
    if (bits == 1) {
        p[0] = mn, p[1] = mx;
        if (mx == mn)
            memset(c, 0, (size_t)m);
        else {
            const float f = isinf(mx - mn) ? 0.25f : 1.0f, lo = mn * f, d = mx * f - lo;
            for (int j = 0; j < m; j++) {
                const float u = (float)(hash32(key + (uint32_t)j * U_STEP) >> 8) * U_UNIT;
                c[j] = (unsigned char)(u < (x[j] * f - lo) / d);
            }
        }
    } else {
        const int B = (1 << bits) - 1;
        const float scale = (float)((double)B / ((double)mx - (double)mn + 2e-6)), Bf = (float)B;
        const float f = scale < huge_scale(bits) ? 0.25f : 1.0f, sf = scale / f, lo = mn * f;
        p[0] = mn, p[1] = scale;
        memcpy(par, p, sizeof p);
        if (m == G && bits == 4) {
            quant_full_packed(x, 4, key, f, lo, sf, Bf, out);
            return;
        }
        if (m == G && bits == 2) {
            quant_full_packed(x, 2, key, f, lo, sf, Bf, out);
            return;
        }
        unsigned char *cq = bits == 8 ? out : c; /* 8 bits: the codes are the bytes */
        for (int j = 0; j < m; j++) cq[j] = code_of(x[j], key, j, f, lo, sf, Bf);
        if (bits != 8) pack(out, c, m, bits);
        return;
    }
    memcpy(par, p, sizeof p);
    pack(out, c, m, bits);
}

static void group_dequantize(const unsigned char *par, const unsigned char *in, int m, int bits, float *x) {
    unsigned char c[G];
    float p[2];
    memcpy(p, par, sizeof p);
    if (bits == 1) {
        unpack(c, in, m, bits);
        const float lo = p[0], hi = p[1];
        for (int j = 0; j < m; j++) x[j] = c[j] ? hi : lo;
        return;
    }
    const float mn = p[0], scale = p[1];
    const float f = scale < huge_scale(bits) ? 0.25f : 1.0f, sf = scale / f, lo = mn * f, up = 1.0f / f;
    if (m == G && bits == 4) {
        dequant_full_packed(in, 4, sf, lo, up, x);
        return;
    }
    if (m == G && bits == 2) {
        dequant_full_packed(in, 2, sf, lo, up, x);
        return;
    }
    const unsigned char *cq = bits == 8 ? in : c;
    if (bits != 8) unpack(c, in, m, bits);
    for (int j = 0; j < m; j++) {
        const float v = ((float)cq[j] / sf + lo) * up;
        x[j] = v < FLT_MAX ? v : FLT_MAX;
    }
}

mw_status mw_actq_quantize(const float *x, size_t n, int bits, uint64_t seed, uint64_t stream, void *dst,
                           size_t *bad) {
    if (!mw_actq_bytes(1, bits))
        return mw_fail(MW_ERR_ARG, "activation quantiser: %d bits (the choices: 1, 2, 4, 8)", bits);
    if (n == 0) return MW_OK;
    const size_t groups = n / G + (n % G != 0), code_bytes = (size_t)G * bits / 8;
    unsigned char *par = dst, *codes = par + groups * 2 * sizeof(float);
    const uint64_t state = stream_state(seed, stream);
    size_t first = SIZE_MAX;
#pragma omp parallel for schedule(static) reduction(min : first) if (groups >= PAR_GROUPS)
    for (size_t g = 0; g < groups; g++) {
        const size_t i0 = g * G;
        const int m = n - i0 < G ? (int)(n - i0) : G;
        float mn, mx;
        const long b = group_range(x + i0, m, &mn, &mx);
        if (b >= 0) {
            first = i0 + (size_t)b < first ? i0 + (size_t)b : first;
            continue;
        }
        group_quantize(x + i0, m, bits, group_key(state, g), mn, mx, par + g * 2 * sizeof(float),
                       codes + g * code_bytes);
    }
    if (first != SIZE_MAX) {
        if (bad) *bad = first;
        const float v = x[first];
        return mw_fail(MW_ERR_ARG, "activation value %zu of %zu is %s: a value that is not finite cannot be quantised",
                       first, n, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf");
    }
    return MW_OK;
}

void mw_actq_dequantize(const void *src, size_t n, int bits, float *x) {
    if (!mw_actq_bytes(1, bits) || n == 0) return;
    const size_t groups = n / G + (n % G != 0), code_bytes = (size_t)G * bits / 8;
    const unsigned char *par = src, *codes = par + groups * 2 * sizeof(float);
#pragma omp parallel for schedule(static) if (groups >= PAR_GROUPS)
    for (size_t g = 0; g < groups; g++) {
        const size_t i0 = g * G;
        const int m = n - i0 < G ? (int)(n - i0) : G;
        group_dequantize(par + g * 2 * sizeof(float), codes + g * code_bytes, m, bits, x + i0);
    }
}

void mw_actq_dequantize_group(const void *src, size_t n, int bits, size_t g, float *x) {
    const size_t groups = n / G + (n % G != 0), code_bytes = (size_t)G * bits / 8, i0 = g * G;
    if (!mw_actq_bytes(1, bits) || g >= groups) return;
    const unsigned char *par = src, *codes = par + groups * 2 * sizeof(float);
    group_dequantize(par + g * 2 * sizeof(float), codes + g * code_bytes, n - i0 < G ? (int)(n - i0) : G, bits, x);
}
