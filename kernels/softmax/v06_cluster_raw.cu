// v06_cluster_raw.cu (chapter 6): against v4, raw chunks and 128-512-thread blocks, so several clusters
// share an SM and one's cluster barriers overlap another's memory traffic. Cluster sizes above 8 are
// non-portable (the launch sets the attribute that allows them). Hopper only (clusters).
#include "cluster_merge.cuh"
#include "raw.cuh"

// [[snippet: softmax_v6]]
// v6: v4 with raw chunks and a free block size: a cluster of CL blocks of THREADS per row, grid (CL, rows),
// block rank r holding chunks [r * SLICE, (r + 1) * SLICE), SLICE = NC * THREADS. v4's 1024-thread blocks
// leave one or two blocks per SM, so an SM idles through every cluster barrier; with 128-512 threads and
// raw chunks several clusters share each SM and one's barrier overlaps another's loads and stores.
template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v6_cluster_raw(const T* __restrict__ x, T* __restrict__ y, int cols) {
    constexpr int VEC = Chunk<T>::VEC;
    constexpr int SLICE = NC * THREADS;         // chunks per block
    __shared__ SoftmaxState scratch[THREADS / 32];
    __shared__ SoftmaxState block_state;        // read by the whole cluster
    __shared__ SoftmaxState row_state_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const size_t base = (size_t)blockIdx.y * cols;
    const bool vec_ok = cols % VEC == 0;
    const int first = rank * SLICE + threadIdx.x;

    uint4 q[NC];                                // [NC] raw 16-byte chunks: this thread's part of the slice
    const SoftmaxState mine = softmax_raw_state<T, NC>(x + base, first, THREADS, cols, vec_ok, q);
    const SoftmaxState bs = softmax_block_merge<THREADS>(mine, scratch);
    softmax_cluster_merge<CL>(cluster, bs, block_state, row_state_smem);
    softmax_raw_write<T, NC>(y + base, first, THREADS, cols, vec_ok, q, row_state_smem);
}
// [[/snippet]]
