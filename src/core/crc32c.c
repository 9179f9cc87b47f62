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
