// convert_v3_magic_fp16.cu: int4_convert v3 (parent v2): fp16 output, magic 1024.0, one shift per 8 nibbles.
#include "convert_bench.cuh"

// [[snippet: int4_convert_v3]]
__device__ __forceinline__ void convert_magic_fp16_interleaved(unsigned w, unsigned (&o)[4]) {
    int4x8_to_fp16x8_magic(w, o);
}
// [[/snippet]]

INT4_CONVERT_KERNEL(int4_convert_v3_magic_fp16, convert_magic_fp16_interleaved)
