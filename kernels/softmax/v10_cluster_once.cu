// v10_cluster_once.cu (chapter 6): against v6, one exponential per element instead of two: the sum pass
// keeps e = e^{x - m_t} in the chunk registers in place of x (exp_once.cuh), the write is
// e * e^{m_t - m} / l. Same instances as v6. Hopper only (clusters).
#include "cluster_merge.cuh"
#include "exp_once.cuh"

// [[snippet: softmax_v10]]
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v10_cluster_once(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int SLICE = NC * THREADS;         // chunks per block
    __shared__ SoftmaxState scratch[THREADS / 32];
    __shared__ SoftmaxState block_state;        // read by the whole cluster
    __shared__ SoftmaxState row_state_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const size_t base = (size_t)blockIdx.y * cols;
    const bool vec_ok = cols % Chunk<T>::VEC == 0;
    const int first = rank * SLICE + threadIdx.x;

    uint4 q[NC];                                // [NC] raw chunks, then e^{x - m_t} in their place
#pragma unroll
    for (int j = 0; j < NC; ++j) load_raw(x + base, first + j * THREADS, cols, vec_ok, q[j]);
    const SoftmaxState mine = softmax_chunks_exp_in_place<T, NC>(q);
    const SoftmaxState bs = softmax_block_merge<THREADS>(mine, scratch);
    softmax_cluster_merge<CL>(cluster, bs, block_state, row_state_smem);
    softmax_scaled_write<T, NC>(y + base, first, THREADS, cols, vec_ok, q, mine.m, row_state_smem);
}
// [[/snippet]]
