// v03_block_row.cu (chapter 6): against v2, one block per row, the row in the registers of up to 1024
// threads (16 elements each): one read, a block-level merge. Rows up to 16384.
#include "registers.cuh"

// [[snippet: softmax_v3]]
// v3: one block of THREADS per row; thread t holds chunks t, t + THREADS, ..., t + THREADS (NC - 1).
// The block's states are merged through shared memory (softmax_block_merge: warp merge, one
// __syncthreads, merge of the warps' states).
template <typename T, int NC, int THREADS>
__global__ void __launch_bounds__(THREADS)
softmax_v3_block_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    __shared__ SoftmaxState scratch[THREADS / 32];
    const size_t base = (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    float v[NC][VEC];                           // [NC, VEC] floats: this thread's part of the row
    const SoftmaxState mine = softmax_thread_state<T, NC>(x + base, threadIdx.x, THREADS, cols, vec_ok, v);
    const SoftmaxState row_state = softmax_block_merge<THREADS>(mine, scratch);
    softmax_write<T, NC>(y + base, threadIdx.x, THREADS, cols, vec_ok, v, mine.m, row_state);
}
// [[/snippet]]
