/* Digests of the libm functions whose results reach memwall's numbers (expf, logf: softmax and
 * attention; log, cos, sin: initialisation and the loss; cos: the schedule; pow: AdamW's bias
 * correction). `make test-aarch64` runs it natively and under qemu-aarch64 and requires the same
 * lines: another libm there would mean other checkpoints. sqrt and fma are exact in IEEE 754.
 * Usage: libm_digest [STEP [DUMP]]: expf on every STEP-th float of [-104, 89], logf on every
 * STEP-th positive float, the double functions on 148M/STEP pseudo-random inputs each; one line
 * per function (name, inputs, FNV-1a of the results); DUMP gets every input and result, for diff. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t h;
static unsigned long n;
static FILE *dump;

static void start(void) { h = 0xcbf29ce484222325ULL, n = 0; }
static void mix(const char *name, double x, uint64_t y, double yv) {
    h = (h ^ y) * 0x100000001b3ULL, n++;
    if (dump) fprintf(dump, "%s %a %a\n", name, x, yv);
}
static void report(const char *name) { printf("%s %lu %016llx\n", name, n, (unsigned long long)h); }
static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static uint64_t u64_of(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}
/* volatile function pointers: no constant folding, no builtin, the library's own result */
static float (*volatile p_expf)(float) = expf, (*volatile p_logf)(float) = logf;
static double (*volatile p_log)(double) = log, (*volatile p_cos)(double) = cos,
                                 (*volatile p_sin)(double) = sin;
static double (*volatile p_pow)(double, double) = pow;

int main(int argc, char **argv) {
    const long step = argc > 1 ? strtol(argv[1], NULL, 10) : 37;
    if (step < 1 || step > 1000000) {
        fprintf(stderr, "libm_digest: STEP must be 1..1000000\n");
        return 2;
    }
    if (argc > 2 && !(dump = fopen(argv[2], "w"))) {
        fprintf(stderr, "libm_digest: cannot write %s\n", argv[2]);
        return 2;
    }
    start();
    for (uint64_t u = 0x80000000u; u <= u_of(-104.0f); u += (uint64_t)step) {
        const float x = f_of((uint32_t)u), y = p_expf(x);
        mix("expf", x, u_of(y), y);
    }
    for (uint64_t u = 0; u <= u_of(89.0f); u += (uint64_t)step) {
        const float x = f_of((uint32_t)u), y = p_expf(x);
        mix("expf", x, u_of(y), y);
    }
    report("expf");
    start();
    for (uint64_t u = 1; u < 0x7f800000u; u += (uint64_t)step) {
        const float x = f_of((uint32_t)u), y = p_logf(x);
        mix("logf", x, u_of(y), y);
    }
    report("logf");
    const char *names[] = {"log", "cos", "sin", "pow"};
    const unsigned long count = 148000000UL / (unsigned long)step;
    for (int f = 0; f < 4; f++) {
        start();
        uint64_t s = 88172645463325252ULL;
        while (n < count) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            const double u = (double)(s >> 11) * 0x1p-53;
            double x, y;
            switch (f) {
            case 0: x = u * 1e6 + 0x1p-60, y = p_log(x); break;  /* (0, 1e6] */
            case 1: x = (u - 0.5) * 100, y = p_cos(x); break;     /* [-50, 50] */
            case 2: x = (u - 0.5) * 100, y = p_sin(x); break;
            default: x = u, y = p_pow(x, (double)(s % 100000 + 1)); break; /* beta^t */
            }
            mix(names[f], x, u64_of(y), y);
        }
        report(names[f]);
    }
    if (dump) fclose(dump);
    return 0;
}
