/* libFuzzer target: the activation quantiser (src/kernels/cpu/actq.c) on arbitrary floats. Byte 0
 * picks the bit width (bits 0-1: 1, 2, 4, 8), an unaligned destination (bit 2) and how the rest is
 * read (bit 3: one value a byte, (int8) / 10, for groups of few distinct values; else raw floats,
 * any bits); bytes 1-8 the seed and stream. Checks: a value that is not finite is refused with the
 * first such index, and the same values made finite (exponent bit cleared) are not; the buffers
 * are exactly mw_actq_bytes and n floats (ASan sees a write past either); 1 and 2 threads store the
 * same bytes; every value comes back finite within 1/scale (plus float rounding), 1 bit within the
 * group's range; a constant group comes back exactly. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/kernels/cpu/actq.h"
#include "memwall.h"

#define GR MW_ACTQ_GROUP

static void round_trip(const float *x, size_t n, int bits, uint64_t seed, int unaligned) {
    const size_t nb = mw_actq_bytes(n, bits);
    unsigned char *buf = malloc(nb + 1 + (size_t)unaligned), *d = buf + unaligned;
    unsigned char *d2 = malloc(nb + 1);
    float *y = malloc(n * sizeof(float) + 1);
    size_t bad = SIZE_MAX;
    omp_set_num_threads(1);
    if (mw_actq_quantize(x, n, bits, seed, seed >> 32, d, &bad) != MW_OK) abort();
    omp_set_num_threads(2);
    if (mw_actq_quantize(x, n, bits, seed, seed >> 32, d2, &bad) != MW_OK || memcmp(d, d2, nb)) abort();
    if (bad != SIZE_MAX) abort(); /* untouched on success */
    mw_actq_dequantize(d, n, bits, y);
    for (size_t g = 0; g * GR < n; g++) {
        const size_t m = n - g * GR < GR ? n - g * GR : GR;
        float par[2];
        memcpy(par, d + g * 8, sizeof par);
        int constant = 1;
        for (size_t j = 0; j < m; j++) constant &= x[g * GR + j] == x[g * GR];
        for (size_t j = 0; j < m; j++) {
            const size_t i = g * GR + j;
            if (!isfinite(y[i])) abort();
            if (constant && y[i] != x[i]) abort();
            const double err = fabs((double)y[i] - x[i]);
            const double lim = bits == 1 ? (double)par[1] - par[0]
                                         : (1 + 0x1p-14) / par[1] +
                                               0x1p-22 * fmax(fabs(x[i]), fmax(fabs(par[0]), fabs(y[i])));
            if (!(err <= lim)) abort();
        }
    }
    free(buf), free(d2), free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 9) return 0;
    const int bits = 1 << (data[0] & 3), unaligned = data[0] >> 2 & 1, bytewise = data[0] >> 3 & 1;
    uint64_t seed;
    memcpy(&seed, data + 1, sizeof seed);
    data += 9, size -= 9;
    const size_t n = bytewise ? size : size / 4;
    float *x = malloc(n * sizeof(float) + 1);
    size_t first = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (bytewise)
            x[i] = (float)(int8_t)data[i] / 10.0f;
        else
            memcpy(x + i, data + 4 * i, sizeof(float));
        if (!isfinite(x[i]) && first == SIZE_MAX) first = i;
    }
    if (first != SIZE_MAX) {
        unsigned char *d = malloc(mw_actq_bytes(n, bits));
        size_t bad = 0;
        if (mw_actq_quantize(x, n, bits, seed, 1, d, &bad) != MW_ERR_ARG || bad != first) abort();
        free(d);
        for (size_t i = 0; i < n; i++)
            if (!isfinite(x[i])) {
                uint32_t b;
                memcpy(&b, x + i, sizeof b);
                b &= ~0x40000000u; /* the exponent's top bit: now finite */
                memcpy(x + i, &b, sizeof b);
            }
    }
    round_trip(x, n, bits, seed, unaligned);
    free(x);
    return 0;
}
