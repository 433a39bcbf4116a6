// convert_v2_magic_interleaved.cu: int4_convert v2 (parent v1): v1 on AWQ's interleaved order; the pairs come out in order, no prmt.
#include "convert_bench.cuh"

// [[snippet: int4_convert_v2]]
// Magic number, AWQ's interleaved order: nibble i holds element {0,2,4,6,1,3,5,7}[i], so the lop3
// pair (i, i+4) is already the element pair (2i, 2i+1). No prmt.
__device__ __forceinline__ void convert_magic_interleaved(unsigned w, unsigned (&o)[4]) {
    unsigned b[4];
    int4x8_to_bf16x8_biased(w, b);
    const __nv_bfloat162 k128 = u32_as_bf162(BF16X2_MAGIC);
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = bf162_as_u32(__hsub2(u32_as_bf162(b[j]), k128));
}
// [[/snippet]]

INT4_CONVERT_KERNEL(int4_convert_v2_magic_interleaved, convert_magic_interleaved)
