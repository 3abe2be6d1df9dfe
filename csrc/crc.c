/* CRC-32 and CRC-32C (see crc.h). Both by slicing-by-8: eight 256-entry
 * tables per polynomial, built once, let one step fold eight bytes into the
 * CRC with eight lookups instead of eight dependent byte steps (about
 * 1.5 GB/s). CRC-32 guards whole checkpoints, hundreds of MB read and
 * written at page-cache speed, so on x86-64 CPUs with carry-less multiply it
 * takes a faster path: the input is folded 64 bytes at a time into four
 * 128-bit remainders by carry-less multiplication with x^k mod P, which are
 * folded into one and reduced to 32 bits with Barrett's method (Gopal et al.,
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction", Intel, 2009); several GB/s. */
#include "crc.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC_HAVE_CLMUL 1
#include <immintrin.h>
#endif

#define CRC32_POLY 0xEDB88320u
#define CRC32C_POLY 0x82F63B78u

/* tables[k][b]: the CRC update of byte b followed by k zero bytes. */
typedef struct {
    uint32_t poly;
    uint32_t tables[8][256];
} crc_tables_;

static crc_tables_ crc32_ = {CRC32_POLY, {{0}}}, crc32c_ = {CRC32C_POLY, {{0}}};
static pthread_once_t tables_once_ = PTHREAD_ONCE_INIT;
static int have_clmul_;

static void build_(crc_tables_ *t) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (t->poly & (0u - (c & 1u)));
        t->tables[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            t->tables[k][b] = (t->tables[k - 1][b] >> 8) ^ t->tables[0][t->tables[k - 1][b] & 0xff];
}

static void init_once_(void) {
    build_(&crc32_);
    build_(&crc32c_);
#ifdef CRC_HAVE_CLMUL
    __builtin_cpu_init();
    have_clmul_ = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

/* Extends the inverted CRC state c over p[0..n). */
static uint32_t slice8_(const crc_tables_ *t, uint32_t c, const unsigned char *p, size_t n) {
    const uint32_t(*tb)[256] = t->tables;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* The word's first byte in memory is its low byte, which the reflected CRC takes first. */
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = tb[7][w & 0xff] ^ tb[6][(w >> 8) & 0xff] ^ tb[5][(w >> 16) & 0xff] ^ tb[4][(w >> 24) & 0xff] ^
            tb[3][(w >> 32) & 0xff] ^ tb[2][(w >> 40) & 0xff] ^ tb[1][(w >> 48) & 0xff] ^ tb[0][w >> 56];
    }
#endif
    for (; n; n--) c = tb[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#ifdef CRC_HAVE_CLMUL
/* Carry-less multiply-and-fold constants for CRC-32 in reflected form, each
 * x^k mod P bit-reflected and shifted left one bit: k = 4*128+32 and 4*128-32
 * fold a remainder 512 bits ahead, k = 128+32 and 128-32 fold it 128 bits
 * ahead, k = 64 folds 64 bits into the low 32; then P itself and
 * mu = floor(x^64 / P) for the Barrett reduction. */
#define K512_LO 0x154442bd4ull
#define K512_HI 0x1c6e41596ull
#define K128_LO 0x1751997d0ull
#define K128_HI 0x0ccaa009eull
#define K64 0x163cd6124ull
#define P_REFLECTED 0x1db710641ull
#define MU_REFLECTED 0x1f7011641ull

/* r folded forward over the distance k (lo/hi constants in one register) and added to next. */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold_(__m128i r, __m128i k, __m128i next) {
    __m128i lo = _mm_clmulepi64_si128(r, k, 0x00), hi = _mm_clmulepi64_si128(r, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* Extends the inverted CRC-32 state c over p[0..n), n >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t clmul_crc32_(uint32_t c, const unsigned char *p,
                                                                      size_t n) {
    __m128i r0 = _mm_loadu_si128((const __m128i *)p), r1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i r2 = _mm_loadu_si128((const __m128i *)(p + 32)), r3 = _mm_loadu_si128((const __m128i *)(p + 48));
    r0 = _mm_xor_si128(r0, _mm_cvtsi32_si128((int)c));
    p += 64, n -= 64;
    const __m128i k512 = _mm_set_epi64x((long long)K512_HI, (long long)K512_LO);
    for (; n >= 64; p += 64, n -= 64) { /* four independent chains keep the multiplier busy */
        r0 = fold_(r0, k512, _mm_loadu_si128((const __m128i *)p));
        r1 = fold_(r1, k512, _mm_loadu_si128((const __m128i *)(p + 16)));
        r2 = fold_(r2, k512, _mm_loadu_si128((const __m128i *)(p + 32)));
        r3 = fold_(r3, k512, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    const __m128i k128 = _mm_set_epi64x((long long)K128_HI, (long long)K128_LO);
    r1 = fold_(r0, k128, r1);
    r2 = fold_(r1, k128, r2);
    __m128i r = fold_(r2, k128, r3);
    for (; n >= 16; p += 16, n -= 16) r = fold_(r, k128, _mm_loadu_si128((const __m128i *)p));
    /* 128 -> 64 bits: the low half times x^(128-32) mod P onto the high half, which appends 32 zero bits. */
    r = _mm_xor_si128(_mm_clmulepi64_si128(k128, r, 0x01), _mm_srli_si128(r, 8));
    /* 64 -> 32 bits, then Barrett: q = (low 32 * mu) low 32, crc = high 32 of (r xor q * P). */
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    r = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(r, mask32), _mm_set_epi64x(0, (long long)K64), 0x00),
                      _mm_srli_si128(r, 4));
    const __m128i pmu = _mm_set_epi64x((long long)MU_REFLECTED, (long long)P_REFLECTED);
    __m128i q = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(r, mask32), pmu, 0x10), mask32);
    r = _mm_xor_si128(r, _mm_clmulepi64_si128(q, pmu, 0x00));
    return (uint32_t)_mm_extract_epi32(r, 1);
}
#endif

static ddpc_status init_(const char *what) {
    int err = pthread_once(&tables_once_, init_once_);
    if (err != 0) return DDPC_ERROR(DDPC_ERR_SYS, "%s: building the lookup tables failed: %s", what, strerror(err));
    return DDPC_OK;
}

ddpc_status ddpc_crc32(uint32_t *crc, const void *data, size_t n) {
    CHECK(init_("crc32"));
    const unsigned char *p = data;
    uint32_t c = ~*crc;
#ifdef CRC_HAVE_CLMUL
    if (have_clmul_ && n >= 64) {
        size_t whole = n & ~(size_t)15;
        c = clmul_crc32_(c, p, whole);
        p += whole, n -= whole;
    }
#endif
    *crc = ~slice8_(&crc32_, c, p, n);
    return DDPC_OK;
}

ddpc_status ddpc_crc32c(uint32_t *crc, const void *data, size_t n) {
    CHECK(init_("crc32c"));
    *crc = ~slice8_(&crc32c_, ~*crc, data, n);
    return DDPC_OK;
}
