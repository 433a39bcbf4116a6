// gemv_v6_tiled.cu: W4A16 GEMV v6 (parent v1): v1 on a tiled copy of qweight, one contiguous
// weight range per block (gemv_magic.cuh).
#include "gemv_magic.cuh"

// ---------------------------------------------------------------------------------------------------
// [[snippet: w4a16_gemv_v6]]
// v6: v1's threads, loads and arithmetic on a tiled copy of qweight. In GPTQ's layout a block's 32
// columns are 128 bytes of every qweight row, and rows are N * 4 bytes apart (32 KB at N = 8192): the
// block's 128 KB of weights are 1024 separate 128-byte pieces spread over the whole matrix, so HBM opens
// a DRAM page for each piece and the pieces of neighbouring blocks arrive at different times.
// pack_gemv_tiled stores each 32-column tile's rows back to back ([ceil(N/32), K/8, 32] int32; the last
// tile zero-padded), so one block streams one contiguous 128 KB range. Only the addresses change.
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 2) w4a16_gemv_v6_tiled(
    const uint4* __restrict__ qtiled,           // [ceil(N/32), K/8, 8] uint4 = [ceil(N/32), K/8, 32] int32
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ x,        // [K]
    __nv_bfloat16* __restrict__ out,            // [N]
    int K, int N) {
    const uint4* tile = qtiled + (size_t)blockIdx.x * (K / 8) * (GEMV_COLS / 4);   // this block's [K/8, 8] uint4
    gemv_magic(tile + (threadIdx.x & 7), GEMV_COLS / 4, qzeros, scales, x, out, K, N);
}
// [[/snippet]]
