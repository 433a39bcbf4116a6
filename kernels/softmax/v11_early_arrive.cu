// v11_early_arrive.cu (chapter 6): against v10, the exit cluster barrier split: a relaxed arrive once the
// DSMEM reads are done, the stores, the wait just before exit (no release fence behind the stores).
// Same instances as v10. Hopper only (clusters).
#include "cluster_merge.cuh"
#include "exp_once.cuh"

// [[snippet: softmax_v11]]
// cluster.sync() is an arrive with release semantics plus a wait; in SASS the release is MEMBAR.ALL.GPU +
// ERRBAR before the arrive, a GPU-scope fence that every warp pays (it waits until the warp's earlier
// memory operations are visible GPU-wide). The first barrier of the merge needs it (block_state must be
// visible to the peers); the second only keeps block_state alive for the peers' DSMEM reads and publishes
// row_state inside the block. Here a __syncthreads publishes row_state (warp 0's DSMEM reads are complete
// by then: their merged value has been stored), every thread arrives relaxed (cluster_arrive_relaxed,
// row_stream.cuh), the stores run, and each thread waits for the cluster's arrivals just before it exits.
template <int CL>
__device__ __forceinline__ void softmax_cluster_merge_early_arrive(cg::cluster_group& cluster, SoftmaxState bs,
                                                                   SoftmaxState& block_state,
                                                                   SoftmaxState& row_state) {
    if constexpr (CL == 1) {                    // one block: its state is the row's, no cluster barrier
        if (threadIdx.x == 0) row_state = bs;
        __syncthreads();
        return;
    }
    if (threadIdx.x == 0) block_state = bs;
    cluster.sync();                             // every block's state is published
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        SoftmaxState s = softmax_state_empty();
        if (lane < CL) s = *cluster.map_shared_rank(&block_state, lane);   // DSMEM read
        s = softmax_warp_merge(s);
        if (lane == 0) row_state = s;
    }
    __syncthreads();                            // row_state block-wide; warp 0's reads are consumed (stored)
    cluster_arrive_relaxed();
}

template <typename T, int NC, int THREADS, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, RawOccupancy<NC, THREADS>::MIN_BLOCKS)
softmax_v11_early_arrive(const T* __restrict__ x, T* __restrict__ y, int cols) {
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
    softmax_cluster_merge_early_arrive<CL>(cluster, bs, block_state, row_state_smem);
    softmax_scaled_write<T, NC>(y + base, first, THREADS, cols, vec_ok, q, mine.m, row_state_smem);
    if constexpr (CL > 1) cluster_wait();       // the peers arrived after their DSMEM reads
}
// [[/snippet]]
