// v04_cluster_row.cu (chapter 6): against v3, a cluster of 2-8 blocks per row, each holding a contiguous
// slice in registers; the blocks' (m, l) states merged over DSMEM (cluster_merge.cuh). One read, for rows
// up to 8 x 1024 x 32 = 262144. Hopper only (clusters).
#include "cluster_merge.cuh"
#include "registers.cuh"

// [[snippet: softmax_v4]]
// v4: a cluster of CL blocks (V4_THREADS each) per row; grid (CL, rows). Block rank r holds the
// contiguous slice of chunks [r * SLICE, (r + 1) * SLICE), SLICE = NC * V4_THREADS, in registers.
// Each block merges its threads' states, publishes the block state in its shared memory, and after
// a cluster barrier warp 0 of every block reads all CL states over DSMEM and merges them in the same
// order, so every block of the cluster holds the same (m, l) bits. A second cluster barrier keeps
// each block's shared memory alive until every reader is done.
constexpr int V4_THREADS = 1024;

template <typename T, int NC, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(V4_THREADS)
softmax_v4_cluster_row(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    constexpr int SLICE = NC * V4_THREADS;      // chunks per block
    __shared__ SoftmaxState scratch[V4_THREADS / 32];
    __shared__ SoftmaxState block_state;        // read by the whole cluster
    __shared__ SoftmaxState row_state_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const size_t base = (size_t)blockIdx.y * cols;
    const bool vec_ok = cols % VEC == 0;
    const int first = rank * SLICE + threadIdx.x;

    float v[NC][VEC];                           // [NC, VEC] floats: this thread's part of the slice
    const SoftmaxState mine = softmax_thread_state<T, NC>(x + base, first, V4_THREADS, cols, vec_ok, v);
    const SoftmaxState bs = softmax_block_merge<V4_THREADS>(mine, scratch);
    softmax_cluster_merge<CL>(cluster, bs, block_state, row_state_smem);
    softmax_write<T, NC>(y + base, first, V4_THREADS, cols, vec_ok, v, mine.m, row_state_smem);
}
// [[/snippet]]
