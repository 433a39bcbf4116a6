// convert_v0_naive.cu: int4_convert v0: shift, mask and integer-to-bf16 conversion per nibble.
#include "convert_bench.cuh"

// [[snippet: int4_convert_v0]]
// Naive: for each nibble, shift, mask, convert the integer to bf16; pack two per word.
__device__ __forceinline__ void convert_naive(unsigned w, unsigned (&o)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        unsigned a = (w >> (8 * j)) & 0xfu;          // element 2j
        unsigned b = (w >> (8 * j + 4)) & 0xfu;      // element 2j + 1
        __nv_bfloat162 p = __halves2bfloat162(__uint2bfloat16_rn(a), __uint2bfloat16_rn(b));
        o[j] = bf162_as_u32(p);
    }
}
// [[/snippet]]

INT4_CONVERT_KERNEL(int4_convert_v0_naive, convert_naive)
