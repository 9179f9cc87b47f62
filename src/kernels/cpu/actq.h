/* The activation quantiser (issue 38): GACT's per-group quantiser with stochastic rounding, which
 * stores a value kept for the backward pass in 8, 4 or 2 bits, and the 1-bit store of masks. Owns
 * no memory; calls libm and OpenMP only. The bits depend on (x, n, bits, seed, stream) alone: the
 * same for any thread count, any instruction set and gcc or clang (plain float arithmetic, no
 * contraction, the random draw of value i a pure function of (seed, stream, i)).
 *
 * The math, per group of MW_ACTQ_GROUP consecutive values (the last group may be shorter), with
 * mn, mx the group's minimum and maximum (a zero among them is stored as +0), B = 2^bits - 1 and
 * u_i in [0, 1) the draw of value i (24 bits):
 *   scale = B / (mx - mn + 2e-6)                   in double, rounded once to float
 *   q_i   = min(rint(max((x_i - mn) * scale + (u_i - 0.5), 0)), B)   in float
 *   x'_i  = min(q_i / scale + mn, FLT_MAX)                           in float
 * which is GACT's formula (u - 0.5 added as one term). |x'_i - x_i| <= 1/scale (up to float
 * rounding) and E[x'_i] = x_i over the draws: stochastic rounding is unbiased. A constant group
 * comes back exactly (q = 0, x' = mn). Where the range passes 2^127 ((x - mn) and q / scale would
 * overflow float: scale < B * 2^-127), both sides work on quarters, (x/4 - mn/4) * (4 scale) and
 * 4 (q / (4 scale) + mn/4): the same bits as the formula computed without an exponent limit.
 *
 * bits = 1 is the mask store: the group keeps (mn, mx) instead of (mn, scale), q_i = 1 when
 * u_i < (x_i - mn) / (mx - mn) (0 in a constant group), x'_i = q_i ? mx : mn. A group of at most
 * two distinct values (a 0/1 or a -1/+1 sign mask, a ReLU's 0/c) is stored exactly: its lower value
 * has the fraction 0 (never 1) and its upper value the fraction 1 (always 1). Other values round to
 * mn or mx, unbiased, |x' - x| <= mx - mn.
 *
 * Layout of the stored bytes (opaque to callers; no alignment needed): the groups' (mn, scale)
 * pairs as 2 floats each, in group order, then the groups' codes, each group ceil(m * bits / 8)
 * bytes for its m values. Within a group of m values, with k = 8 / bits codes a byte and
 * per = ceil(m / k) bytes, value j sits in byte j % per at bit bits * (j / per) (planar, so packing
 * and unpacking are plain vector loops); unused bits are 0. */
#ifndef MW_KERNELS_ACTQ_H
#define MW_KERNELS_ACTQ_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

#define MW_ACTQ_GROUP 256

/* Bytes that mw_actq_quantize writes for n values at bits (1, 2, 4, 8): the codes plus 8 bytes
 * (two floats) a group. 0 for n = 0 or another bit width. */
size_t mw_actq_bytes(size_t n, int bits);

/* Quantises x (n) at bits into dst (mw_actq_bytes(n, bits) bytes, written and never more), the
 * draw of value i a pure function of (seed, stream, i): give each stored tensor its own stream.
 * MW_ERR_ARG (message set) for bits not 1, 2, 4, 8, or when a value is inf or NaN: *bad (may be
 * NULL) is then the index of the first such value and dst is unspecified. x and dst must not
 * overlap; either may be NULL when n = 0. */
mw_status mw_actq_quantize(const float *x, size_t n, int bits, uint64_t seed, uint64_t stream, void *dst,
                           size_t *bad);

/* x (n) from src, as mw_actq_quantize stored it with the same n and bits (bits 1, 2, 4, 8; any
 * other writes nothing). */
void mw_actq_dequantize(const void *src, size_t n, int bits, float *x);

/* Values [g G, g G + m) of x, group g alone (m = G but for a last partial group), from src as
 * mw_actq_quantize stored n values: the same floats mw_actq_dequantize gives there. */
void mw_actq_dequantize_group(const void *src, size_t n, int bits, size_t g, float *x);

/* u_i, the draw of value i in [0, 1) (a multiple of 2^-24) that mw_actq_quantize uses: defined
 * here value by value, so that a test can compute it for any i. */
float mw_actq_draw(uint64_t seed, uint64_t stream, size_t i);

#endif
