// reduction_cluster.cu: chapter 5's v6, the sum of reduction.cu's v5 with thread block clusters (sm_90
// and later: __cluster_dims__ does not compile for sm_80, hence its own file, declared with
// requires=("clusters",) in kernels/reduction.py).
//
//   v6_cluster_c{C}  v5 with clusters of C blocks: the C block totals meet through DSMEM, rank 0 writes
//                    one partial per cluster, so C times fewer partials and atomics (C = 2, 4, 8)
//
// The building blocks (block_sum, thread_sum, sum_partials) are reduction.cuh's, unchanged.
#include <cooperative_groups.h>

#include "reduction.cuh"

namespace cg = cooperative_groups;

// [[snippet: reduce_v6]]
// Grid: a multiple of C blocks, clusters of C consecutive blocks. Cluster c = blockIdx.x / C writes
// partial[c]; the last cluster to arrive sums the gridDim.x / C partials in index order.
template <typename T, int C>
__device__ __forceinline__ void reduce_cluster(const T* __restrict__ x, float* partial, unsigned* counter,
                                               float* __restrict__ out, long long n) {
    __shared__ float block_total;  // this block's sum, read by rank 0 of the cluster through DSMEM
    __shared__ bool is_last;
    cg::cluster_group cluster = cg::this_cluster();
    const float s = block_sum(thread_sum<T>(x, n));
    if (threadIdx.x == 0) block_total = s;
    cluster.sync();                                       // every block's total is in its shared memory
    const unsigned rank = cluster.block_rank();
    if (rank == 0 && threadIdx.x == 0) {
        float c = 0.f;
#pragma unroll
        for (int q = 0; q < C; ++q) c += *cluster.map_shared_rank(&block_total, q);  // rank order
        partial[blockIdx.x / C] = c;
        __threadfence();
        const unsigned ticket = atomicAdd(counter, 1u);
        is_last = (ticket == gridDim.x / C - 1);
    }
    cluster.sync();                                       // peers keep block_total alive until it is read
    if (rank != 0 || !is_last) return;                    // (is_last is only read in rank 0)
    __threadfence();
    const float total = sum_partials(partial, gridDim.x / C);
    if (threadIdx.x == 0) {
        *out = total;
        *counter = 0u;
    }
}

#define REDUCE_CLUSTER_KERNELS(C)                                                                      \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 8)                  \
    reduce_v6_cluster_c##C(const float* __restrict__ x, float* partial, unsigned* counter, float* out, \
                           long long n) {                                                              \
        reduce_cluster<float, C>(x, partial, counter, out, n);                                         \
    }                                                                                                  \
    extern "C" __global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(THREADS, 8)                  \
    reduce_v6_cluster_bf16_c##C(const __nv_bfloat16* __restrict__ x, float* partial, unsigned* counter,\
                                float* out, long long n) {                                             \
        reduce_cluster<__nv_bfloat16, C>(x, partial, counter, out, n);                                 \
    }

REDUCE_CLUSTER_KERNELS(2)
REDUCE_CLUSTER_KERNELS(4)
REDUCE_CLUSTER_KERNELS(8)
// [[/snippet]]
