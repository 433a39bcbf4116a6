// gemv_v1_magic.cu: W4A16 GEMV v1 (parent v0): the magic-number conversion and bf16x2 products,
// fp32 sums every 4 products (gemv_magic.cuh).
#include "gemv_magic.cuh"

// [[snippet: w4a16_gemv_v1]]
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v1_magic(
    const uint4* __restrict__ qweight,          // [K/8, N/4] uint4 = [K/8, N] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    const int n = blockIdx.x * GEMV_COLS + (threadIdx.x & 7) * 4;
    gemv_magic(qweight + (n >> 2), N / 4, qzeros, scales, x, out, K, N);
}
// [[/snippet]]
