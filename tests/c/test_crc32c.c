/* CRC-32C: the published check values, and slicing-by-8 against a plain
 * bit-at-a-time CRC on every length and start offset around the 8-byte
 * steps, whole and fed in two pieces. */
#include <string.h>

#include "check.h"
#include "crc32c.h"

static uint32_t crc_bitwise_(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int bit = 0; bit < 8; bit++) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

static uint32_t crc_(uint32_t crc, const void *data, size_t n) {
    EXPECT(ddpc_crc32c(&crc, data, n) == DDPC_OK);
    return crc;
}

static void test_check_values_(void) {
    unsigned char zeros[32] = {0}, ones[32], up[32], down[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) up[i] = (unsigned char)i, down[i] = (unsigned char)(31 - i);
    EXPECT(crc_(0, "123456789", 9) == 0xE3069283u, "check value %08x", crc_(0, "123456789", 9));
    /* RFC 3720, appendix B.4 (iSCSI) */
    EXPECT(crc_(0, zeros, 32) == 0x8A9136AAu);
    EXPECT(crc_(0, ones, 32) == 0x62A8AB43u);
    EXPECT(crc_(0, up, 32) == 0x46DD794Eu);
    EXPECT(crc_(0, down, 32) == 0x113FDB5Cu);
    EXPECT(crc_(0, NULL, 0) == 0 && crc_(0x12345678u, NULL, 0) == 0x12345678u);
}

static void test_matches_bitwise_at_every_length_and_offset_(void) {
    unsigned char buf[80];
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < sizeof buf; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        buf[i] = (unsigned char)x;
    }
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; off + n <= sizeof buf; n++) {
            uint32_t want = crc_bitwise_(0, buf + off, n);
            EXPECT(crc_(0, buf + off, n) == want, "offset %zu length %zu", off, n);
            size_t half = n / 3;
            EXPECT(crc_(crc_(0, buf + off, half), buf + off + half, n - half) == want, "in pieces at %zu of %zu", half, n);
        }
}

int main(void) {
    test_check_values_();
    test_matches_bitwise_at_every_length_and_offset_();
    return check_finish("crc32c");
}
