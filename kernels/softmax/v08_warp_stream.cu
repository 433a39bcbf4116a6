// v08_warp_stream.cu (chapter 6): against v2, each warp walks RPW rows (grid stride) and issues the
// loads of its next row before the math and stores of the current one, so reads, exp math and writes of
// different rows overlap instead of running as three machine-wide phases.
#include "raw.cuh"
#include "registers.cuh"

// [[snippet: softmax_v8]]
// v8: a warp walks rows r, r + G, r + 2G, ... (G = gridDim.x x ROWS warps in the grid). It holds the
// current row widened to floats (v2's one exponential per element) and the next row as raw chunks in
// flight: the next row's loads are issued right after the current row has arrived, before its max, exp,
// merge and stores. In a one-wave launch (v2, v7) every warp reads, then every warp computes, then every
// warp writes, so HBM idles through the math and the read-to-write turnaround; here one row's math
// and stores overlap the next row's loads on every warp.
template <typename T, int NC, int ROWS, int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * ROWS, MIN_BLOCKS)
softmax_v8_warp_stream(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    const int lane = threadIdx.x % 32;
    const int step = gridDim.x * ROWS;
    int r = blockIdx.x * ROWS + threadIdx.x / 32;
    if (r >= rows) return;                      // whole warps leave together
    const bool vec_ok = cols % VEC == 0;
    uint4 q[NC];                                // [NC] raw chunks of the row in flight
#pragma unroll
    for (int j = 0; j < NC; ++j) load_raw(x + (size_t)r * cols, lane + 32 * j, cols, vec_ok, q[j]);
    for (; r < rows; r += step) {
        float v[NC][VEC];                       // [NC, VEC] floats: the current row (waits for its loads)
#pragma unroll
        for (int j = 0; j < NC; ++j) unpack(q[j], v[j]);
        if (r + step < rows) {                  // prefetch: q is free again
#pragma unroll
            for (int j = 0; j < NC; ++j) load_raw(x + (size_t)(r + step) * cols, lane + 32 * j, cols, vec_ok, q[j]);
        }
        const SoftmaxState mine = softmax_values_state<NC, VEC>(v);
        const SoftmaxState row_state = softmax_warp_merge(mine);
        softmax_write<T, NC>(y + (size_t)r * cols, lane, 32, cols, vec_ok, v, mine.m, row_state);
    }
}
// [[/snippet]]
