/* Deterministic random numbers: splitmix64 state, uniform and Gaussian draws. */
#ifndef MW_RNG_H
#define MW_RNG_H
#include <math.h>
#include <stdint.h>

static inline uint64_t mw_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform in [0, n) without modulo bias worth mentioning for n << 2^64. */
static inline uint64_t mw_rng_below(uint64_t *s, uint64_t n) { return mw_rng_next(s) % n; }
/* Uniform in (0, 1]. */
static inline double mw_rng_unit(uint64_t *s) {
    return ((mw_rng_next(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
}
/* Standard normal (Box-Muller, one draw per call). */
static inline double mw_rng_normal(uint64_t *s) {
    double u1 = mw_rng_unit(s), u2 = mw_rng_unit(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
#endif
