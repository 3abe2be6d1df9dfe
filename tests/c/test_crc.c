/* CRC-32 and CRC-32C: the published check values, and the fast paths
 * against a plain bit-at-a-time CRC on every length and start offset around
 * their steps (8 bytes for the tables; 16 and 64 bytes and the 64-byte
 * minimum for carry-less multiplication), whole and fed in two pieces. */
#include <string.h>

#include "check.h"
#include "crc.h"

typedef ddpc_status (*crc_fn_)(uint32_t *, const void *, size_t);

static uint32_t crc_bitwise_(uint32_t poly, uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int bit = 0; bit < 8; bit++) crc = (crc & 1u) ? (crc >> 1) ^ poly : crc >> 1;
    }
    return ~crc;
}

static uint32_t crc_(crc_fn_ fn, uint32_t crc, const void *data, size_t n) {
    EXPECT(fn(&crc, data, n) == DDPC_OK);
    return crc;
}

static void test_check_values_(void) {
    unsigned char zeros[32] = {0}, ones[32], up[32], down[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) up[i] = (unsigned char)i, down[i] = (unsigned char)(31 - i);
    EXPECT(crc_(ddpc_crc32c, 0, "123456789", 9) == 0xE3069283u);
    /* RFC 3720, appendix B.4 (iSCSI) */
    EXPECT(crc_(ddpc_crc32c, 0, zeros, 32) == 0x8A9136AAu);
    EXPECT(crc_(ddpc_crc32c, 0, ones, 32) == 0x62A8AB43u);
    EXPECT(crc_(ddpc_crc32c, 0, up, 32) == 0x46DD794Eu);
    EXPECT(crc_(ddpc_crc32c, 0, down, 32) == 0x113FDB5Cu);
    EXPECT(crc_(ddpc_crc32, 0, "123456789", 9) == 0xCBF43926u, "check value %08x",
           crc_(ddpc_crc32, 0, "123456789", 9));
    EXPECT(crc_(ddpc_crc32, 0, "The quick brown fox jumps over the lazy dog", 43) == 0x414FA339u);
    for (int i = 0; i < 2; i++) {
        crc_fn_ fn = i ? ddpc_crc32 : ddpc_crc32c;
        EXPECT(crc_(fn, 0, NULL, 0) == 0 && crc_(fn, 0x12345678u, NULL, 0) == 0x12345678u);
    }
}

static void test_matches_bitwise_at_every_length_and_offset_(void) {
    static unsigned char buf[600];
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < sizeof buf; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        buf[i] = (unsigned char)x;
    }
    const struct { crc_fn_ fn; uint32_t poly; const char *name; } crcs[] = {
        {ddpc_crc32, 0xEDB88320u, "crc32"}, {ddpc_crc32c, 0x82F63B78u, "crc32c"}};
    for (int k = 0; k < 2; k++)
        for (size_t off = 0; off < 16; off++)
            for (size_t n = 0; off + n <= sizeof buf; n++) {
                uint32_t want = crc_bitwise_(crcs[k].poly, 0, buf + off, n);
                EXPECT(crc_(crcs[k].fn, 0, buf + off, n) == want, "%s offset %zu length %zu", crcs[k].name, off, n);
                size_t part = n / 3;
                EXPECT(crc_(crcs[k].fn, crc_(crcs[k].fn, 0, buf + off, part), buf + off + part, n - part) == want,
                       "%s in pieces at %zu of %zu", crcs[k].name, part, n);
                EXPECT(crc_(crcs[k].fn, 0xA5A5A5A5u, buf + off, n) ==
                           crc_bitwise_(crcs[k].poly, 0xA5A5A5A5u, buf + off, n),
                       "%s from a running value, length %zu", crcs[k].name, n);
            }
}

int main(void) {
    test_check_values_();
    test_matches_bitwise_at_every_length_and_offset_();
    return check_finish("crc");
}
