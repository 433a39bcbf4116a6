// v02_warp_row.cu (chapter 6): against v1, one warp per row with the whole row in registers: one read,
// a warp-level (m, l) merge, one write. Rows up to 32 x 8 chunks (1024 fp32, 2048 bf16).
#include "registers.cuh"

// [[snippet: softmax_v2]]
// v2: one warp per row, V2_ROWS rows per block. Lane l holds chunks l, l + 32, ..., l + 32 (NC - 1):
// each load instruction of the warp reads 512 contiguous bytes. No shared memory, no __syncthreads.
constexpr int V2_ROWS = 8;

template <typename T, int NC>
__global__ void __launch_bounds__(32 * V2_ROWS)
softmax_v2_warp_row(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    const int lane = threadIdx.x % 32;
    const int r = blockIdx.x * V2_ROWS + threadIdx.x / 32;
    if (r >= rows) return;                      // whole warps leave together
    const size_t base = (size_t)r * cols;
    const bool vec_ok = cols % VEC == 0;
    float v[NC][VEC];                           // [NC, VEC] floats: this lane's part of the row
    const SoftmaxState mine = softmax_thread_state<T, NC>(x + base, lane, 32, cols, vec_ok, v);
    const SoftmaxState row_state = softmax_warp_merge(mine);
    softmax_write<T, NC>(y + base, lane, 32, cols, vec_ok, v, mine.m, row_state);
}
// [[/snippet]]
