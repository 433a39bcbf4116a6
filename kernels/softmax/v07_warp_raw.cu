// v07_warp_raw.cu (chapter 6): against v2, raw chunks and a register cap from MIN_BLOCKS: short bf16
// rows at 4 registers per 8 elements, so every row of a small input is resident at once (one wave).
#include "raw.cuh"

// [[snippet: softmax_v7]]
// v7: v2 with raw chunks: one warp per row, ROWS rows per block, lane l holding chunks l, l + 32, ...
// MIN_BLOCKS is the occupancy asked of ptxas (a register cap of 65536 / (MIN_BLOCKS x 32 ROWS)). For
// bf16 rows of 1024 (4 chunks, 16 data registers per lane) 8 blocks of 8 warps is 32 registers per
// thread and 64 rows per SM: 132 x 64 >= 8192 rows, so the whole input is in flight in one wave.
template <typename T, int NC, int ROWS, int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * ROWS, MIN_BLOCKS)
softmax_v7_warp_raw(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * ROWS + threadIdx.x / 32;
    if (r >= rows) return;                      // whole warps leave together
    const size_t base = (size_t)r * cols;
    const bool vec_ok = cols % Chunk<T>::VEC == 0;
    uint4 q[NC];                                // [NC] raw 16-byte chunks: this lane's part of the row
    const SoftmaxState mine = softmax_raw_state<T, NC>(x + base, lane, 32, cols, vec_ok, q);
    const SoftmaxState row_state = softmax_warp_merge(mine);
    softmax_raw_write<T, NC>(y + base, lane, 32, cols, vec_ok, q, row_state);
}
// [[/snippet]]
