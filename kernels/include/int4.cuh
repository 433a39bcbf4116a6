// int4.cuh: INT4 nibble helpers and the magic-number INT4 -> bf16 / fp16 conversion (chapter 9).
//
// A 32-bit word holds 8 unsigned 4-bit values ("nibbles"), nibble i in bits [4i, 4i+4).
// Which logical element sits in nibble i is the packing order: GPTQ packs K sequentially
// (nibble i = element i); AWQ packs N interleaved (nibble i = element {0,2,4,6,1,3,5,7}[i]).
//
// The magic-number trick: a bf16 whose exponent makes the ulp exactly 1 is 128.0 (0x4300: 7
// mantissa bits, 2^7 * (1 + m/128) = 128 + m). OR-ing a nibble q into the low mantissa bits gives
// the bf16 value 128 + q exactly; subtracting 128 (or 128 + zero point) leaves q - z, exact.
// For fp16 the same holds at 1024.0 (0x6400, 10 mantissa bits). One lop3 does the mask and the OR
// for two nibbles at once: one in each 16-bit half of the word.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// d = f(a, b, c) for any 3-input bitwise function f, given by its truth table LUT
// (evaluate f on a = 0xF0, b = 0xCC, c = 0xAA). (a & b) | c  ->  (0xF0 & 0xCC) | 0xAA = 0xEA.
template <int LUT>
__device__ __forceinline__ unsigned lop3(unsigned a, unsigned b, unsigned c) {
    unsigned d;
    asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(d) : "r"(a), "r"(b), "r"(c), "n"(LUT));
    return d;
}
#define LOP3_AND_OR 0xEA   // (a & b) | c

__device__ __forceinline__ __nv_bfloat162 u32_as_bf162(unsigned u) {
    return *reinterpret_cast<__nv_bfloat162*>(&u);
}
__device__ __forceinline__ unsigned bf162_as_u32(__nv_bfloat162 v) {
    return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ __half2 u32_as_half2(unsigned u) { return *reinterpret_cast<__half2*>(&u); }
__device__ __forceinline__ unsigned half2_as_u32(__half2 v) { return *reinterpret_cast<unsigned*>(&v); }

#define BF16X2_MAGIC 0x43004300u   // (128.0, 128.0) in bf16
#define FP16X2_MAGIC 0x64006400u   // (1024.0, 1024.0) in fp16
#define BF16X2_ONE 0x3f803f80u     // (1.0, 1.0) in bf16: a B fragment of ones makes an mma sum A's rows

// [[snippet: int4_magic_bf16]]
// 8 nibbles -> 4 bf16x2 words holding 128 + q ("biased"), in nibble pairs (j, j + 4):
//   b[0] = (128+q0, 128+q4), b[1] = (128+q1, 128+q5), b[2] = (128+q2, 128+q6), b[3] = (128+q3, 128+q7)
// (low half first). Mask 0x000f000f keeps nibble j of the low half-word and nibble j+4 of the high
// one; the OR with 0x43004300 puts each into the mantissa of 128.0. 3 shifts + 4 lop3 for 8 values.
__device__ __forceinline__ void int4x8_to_bf16x8_biased(unsigned w, unsigned (&b)[4]) {
    b[0] = lop3<LOP3_AND_OR>(w,       0x000f000fu, BF16X2_MAGIC);
    b[1] = lop3<LOP3_AND_OR>(w >> 4,  0x000f000fu, BF16X2_MAGIC);
    b[2] = lop3<LOP3_AND_OR>(w >> 8,  0x000f000fu, BF16X2_MAGIC);
    b[3] = lop3<LOP3_AND_OR>(w >> 12, 0x000f000fu, BF16X2_MAGIC);
}

// (128 + z, 128 + z) as bf16x2: the same trick applied to a zero point z in [0, 15].
__device__ __forceinline__ unsigned bf16x2_biased_zero(unsigned z) {
    return BF16X2_MAGIC | (z * 0x00010001u);
}
// [[/snippet]]

// [[snippet: int4_magic_fp16]]
// 8 nibbles -> 4 fp16x2 words holding the exact values q (not biased), pairs (j, j + 4) as above.
// fp16 has 10 mantissa bits, so the odd nibble can stay 4 bits up: (1024 + 16 q) * 1/16 - 64 = q.
// One shift (by 8) serves nibbles 2,3,6,7: 1 shift + 4 lop3 + 2 sub + 2 fma for 8 values.
__device__ __forceinline__ void int4x8_to_fp16x8_magic(unsigned w, unsigned (&h)[4]) {
    const __half2 k1024 = u32_as_half2(FP16X2_MAGIC);      // (1024, 1024)
    const __half2 k1_16 = u32_as_half2(0x2c002c00u);       // (1/16, 1/16)
    const __half2 kneg64 = u32_as_half2(0xd400d400u);      // (-64, -64)
    const unsigned w8 = w >> 8;
    unsigned lo0 = lop3<LOP3_AND_OR>(w,  0x000f000fu, FP16X2_MAGIC);   // 1024 + (q0, q4)
    unsigned hi0 = lop3<LOP3_AND_OR>(w,  0x00f000f0u, FP16X2_MAGIC);   // 1024 + 16 (q1, q5)
    unsigned lo1 = lop3<LOP3_AND_OR>(w8, 0x000f000fu, FP16X2_MAGIC);   // 1024 + (q2, q6)
    unsigned hi1 = lop3<LOP3_AND_OR>(w8, 0x00f000f0u, FP16X2_MAGIC);   // 1024 + 16 (q3, q7)
    h[0] = half2_as_u32(__hsub2(u32_as_half2(lo0), k1024));
    h[1] = half2_as_u32(__hfma2(u32_as_half2(hi0), k1_16, kneg64));
    h[2] = half2_as_u32(__hsub2(u32_as_half2(lo1), k1024));
    h[3] = half2_as_u32(__hfma2(u32_as_half2(hi1), k1_16, kneg64));
}
// [[/snippet]]
