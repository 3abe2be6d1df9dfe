/* Element types shared by buffers, ops, the communicator and the loader,
 * with the host conversions for the two 16-bit float formats. */
#ifndef DDPC_DTYPE_H
#define DDPC_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    DDPC_FLOAT32 = 0,
    DDPC_FLOAT64,
    DDPC_FLOAT16,
    DDPC_BFLOAT16,
    DDPC_INT32,
    DDPC_INT64,
    DDPC_UINT8,
    DDPC_COMPLEX64, /* (float real, float imag) pairs, as C99's float complex */
    DDPC_COMPLEX128,
    DDPC_BOOL, /* one byte, 0 or 1 */
    DDPC_NDTYPES
} ddpc_dtype;

/* A complex128 element as the ops that only move elements (copies,
 * transposes, strided views) move it: one 16-byte word. */
typedef struct {
    uint64_t lo, hi;
} ddpc_word16;

size_t ddpc_dtype_size(ddpc_dtype dt);
const char *ddpc_dtype_name(ddpc_dtype dt);
int ddpc_dtype_is_float(ddpc_dtype dt);
int ddpc_dtype_is_complex(ddpc_dtype dt);

/* IEEE binary16 and bfloat16 from float with round-to-nearest-even (NaN stays
 * NaN, quiet, overflow goes to infinity), and back (exact; a float16 signalling
 * NaN comes back quiet, as the F16C instruction returns it). */
static inline float ddpc_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        exp = 113u;
        while (!(man & 0x400u)) { man <<= 1; exp--; }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t ddpc_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal */
        uint32_t e = absx >> 23, man = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float ddpc_bf16_to_float(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t ddpc_float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* n float16 (dt DDPC_FLOAT16) or bfloat16 (DDPC_BFLOAT16) values to float
 * and back, the same bits as the functions above one value at a time; float16
 * goes 8 values an instruction where the CPU has F16C. Every host loop that
 * converts 16-bit arrays goes through these two. */
void ddpc_16bit_to_float(ddpc_dtype dt, const uint16_t *in, float *out, size_t n);
void ddpc_float_to_16bit(ddpc_dtype dt, const float *in, uint16_t *out, size_t n);

#endif
