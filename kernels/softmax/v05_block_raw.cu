// v05_block_raw.cu (chapter 6): against v3, each 16-byte chunk kept raw (4 registers for 4 fp32 or 8
// bf16) and e^{x - m} recomputed at the write; block size and chunks per thread are template parameters
// and __launch_bounds__ asks for enough blocks per SM. bf16 rows get twice the bytes in flight per register.
#include "raw.cuh"

// [[snippet: softmax_v5]]
// v5: v3 with raw chunks: one block of THREADS per row, NC chunks per thread (both template parameters),
// grid (rows). For bf16 each thread carries 16 x NC bytes in 4 x NC registers, twice v3's bytes per
// register, so an SM keeps twice the row bytes in flight at the same occupancy.
template <typename T, int NC, int THREADS>
__global__ void __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v5_block_raw(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    __shared__ SoftmaxState scratch[THREADS / 32];
    const size_t base = (size_t)blockIdx.x * cols;
    const bool vec_ok = cols % VEC == 0;
    uint4 q[NC];                                // [NC] raw 16-byte chunks: this thread's part of the row
    const SoftmaxState mine = softmax_raw_state<T, NC>(x + base, threadIdx.x, THREADS, cols, vec_ok, q);
    const SoftmaxState row_state = softmax_block_merge<THREADS>(mine, scratch);
    softmax_raw_write<T, NC>(y + base, threadIdx.x, THREADS, cols, vec_ok, q, row_state);
}
// [[/snippet]]
