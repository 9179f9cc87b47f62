/* CRC-32C (Castagnoli), the checksum of checkpoint records. Hardware instruction where the CPU
 * has SSE4.2, a table otherwise; both give the same value. */
#ifndef MW_CRC32C_H
#define MW_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Extends crc (start with 0) over n bytes. */
uint32_t mw_crc32c(uint32_t crc, const void *buf, size_t n);
/* The CRC of A then B, from crc(A), crc(B) and B's length in bytes: pieces of a record checksummed
 * where they are (by different ranks) give the record's CRC. */
uint32_t mw_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* The table version, the oracle for tests. */
uint32_t mw_crc32c_sw(uint32_t crc, const void *buf, size_t n);
#endif
