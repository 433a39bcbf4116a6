// convert_v1_magic.cu: int4_convert v1 (parent v0): lop3 into the mantissa of 128.0 for two nibbles at once, subtract,
// prmt back to order (GPTQ's sequential order).
#include "convert_bench.cuh"

// [[snippet: int4_convert_v1]]
// Magic number, sequential (GPTQ) order: the lop3 pairs are (j, j+4); four prmt restore (0,1),(2,3),...
__device__ __forceinline__ void convert_magic_sequential(unsigned w, unsigned (&o)[4]) {
    unsigned b[4];
    int4x8_to_bf16x8_biased(w, b);
    const __nv_bfloat162 k128 = u32_as_bf162(BF16X2_MAGIC);
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = bf162_as_u32(__hsub2(u32_as_bf162(b[j]), k128));   // exact q
    o[0] = __byte_perm(b[0], b[1], 0x5410);   // (q0, q1): low halves of b0, b1
    o[1] = __byte_perm(b[2], b[3], 0x5410);   // (q2, q3)
    o[2] = __byte_perm(b[0], b[1], 0x7632);   // (q4, q5): high halves
    o[3] = __byte_perm(b[2], b[3], 0x7632);   // (q6, q7)
}
// [[/snippet]]

INT4_CONVERT_KERNEL(int4_convert_v1_magic, convert_magic_sequential)
