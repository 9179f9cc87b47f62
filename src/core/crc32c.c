#include "crc32c.h"

#include <string.h>

static uint32_t table[256];
static int table_ready;

static void init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
    table_ready = 1;
}

uint32_t mw_crc32c_sw(uint32_t crc, const void *buf, size_t n) {
    if (!table_ready) init_table();
    const unsigned char *p = buf;
    crc = ~crc;
    while (n--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && defined(__SSE4_2__)
uint32_t mw_crc32c(uint32_t crc, const void *buf, size_t n) {
    const unsigned char *p = buf;
    uint64_t c = ~crc;
    for (; n && ((uintptr_t)p & 7); n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    for (; n; n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#else
uint32_t mw_crc32c(uint32_t crc, const void *buf, size_t n) { return mw_crc32c_sw(crc, buf, n); }
#endif

/* Combining (the GF(2) algebra of zlib's crc32_combine, for this polynomial): the CRC of A then B
 * from crc(A), crc(B) and B's length is crc(A) times x^(8 len) modulo the polynomial, plus crc(B).
 * Polynomials are reflected, as the CRC's bits are: bit 31 is x^0. */
#define POLY 0x82F63B78u

static uint32_t mulmod(uint32_t a, uint32_t b) { /* a * b modulo POLY */
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

uint32_t mw_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    uint32_t x2k = 1u << 30; /* x^(2^k) for k = 0: x */
    uint32_t p = 1u << 31;   /* x^0 */
    for (uint64_t n = len_b * 8; n; n >>= 1) { /* x^(8 len_b) by squaring */
        if (n & 1) p = mulmod(x2k, p);
        x2k = mulmod(x2k, x2k);
    }
    return mulmod(p, crc_a) ^ crc_b;
}
