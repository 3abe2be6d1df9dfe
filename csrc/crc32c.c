/* CRC-32C by slicing-by-8 (see crc32c.h): eight 256-entry tables, built
 * once, let one step fold eight bytes into the CRC with eight lookups
 * instead of eight dependent byte steps. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

/* table_[k][b]: the CRC update of byte b followed by k zero bytes. */
static uint32_t table_[8][256];
static pthread_once_t tables_once_ = PTHREAD_ONCE_INIT;

static void build_tables_(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        table_[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++) table_[k][b] = (table_[k - 1][b] >> 8) ^ table_[0][table_[k - 1][b] & 0xff];
}

ddpc_status ddpc_crc32c(uint32_t *crc, const void *data, size_t n) {
    int err = pthread_once(&tables_once_, build_tables_);
    if (err != 0) return DDPC_ERROR(DDPC_ERR_SYS, "crc32c: building the lookup tables failed: %s", strerror(err));
    const unsigned char *p = data;
    uint32_t c = ~*crc;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* The word's first byte in memory is its low byte, which the reflected CRC takes first. */
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = table_[7][w & 0xff] ^ table_[6][(w >> 8) & 0xff] ^ table_[5][(w >> 16) & 0xff] ^
            table_[4][(w >> 24) & 0xff] ^ table_[3][(w >> 32) & 0xff] ^ table_[2][(w >> 40) & 0xff] ^
            table_[1][(w >> 48) & 0xff] ^ table_[0][w >> 56];
    }
#endif
    for (; n; n--) c = table_[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    *crc = ~c;
    return DDPC_OK;
}
