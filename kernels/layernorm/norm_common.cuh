// norm_common.cuh: what every LayerNorm / RMSNorm version shares: fp32 <-> T conversions, the 16-byte
// Pack, sums over the threads of a row (a warp, a block, or a cluster of blocks), and where a
// thread's part of a row lies (RowSlice).
//
// Thread-block clusters exist from sm_90 on. On an older GPU (an A100, or BOOK_ARCH=sm_80 on a Hopper
// GPU) these files still build: NORM_CLUSTER_DIMS(C) declares nothing and the cluster branches compile
// to nothing. The host side (kernels/layernorm/__init__.py) instantiates CLUSTER > 1 only in the
// KernelSources that declare requires=("clusters",), so no cluster kernel is ever built for sm_80; the
// static_assert in row_slice says so if one were.
#pragma once
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include "common.cuh"
#include "welford.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define NORM_HAS_CLUSTERS 1
#define NORM_CLUSTER_DIMS(C) __cluster_dims__(C, 1, 1)
#else
#define NORM_HAS_CLUSTERS 0
#define NORM_CLUSTER_DIMS(C)
#endif

namespace cg = cooperative_groups;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// VEC values of T as one aligned access: 16 bytes for (float, 4) and (bf16, 8), one value for VEC 1.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

// This block's rank in its cluster, and the barrier of the whole cluster (no-ops without clusters).
__device__ __forceinline__ int cluster_rank() {
#if NORM_HAS_CLUSTERS
    return (int)cg::this_cluster().block_rank();
#else
    return 0;
#endif
}

__device__ __forceinline__ void cluster_sync() {
#if NORM_HAS_CLUSTERS
    cg::this_cluster().sync();
#endif
}

// Sum over the CLUSTER blocks of a cluster: thread 0 of each block publishes its block's sum in `slot`
// (shared memory), lane r of every warp reads rank r's slot over DSMEM. The caller must cluster_sync()
// again before exiting (a block's shared memory must outlive the other blocks' reads).
template <int CLUSTER>
__device__ __forceinline__ float cluster_sum(float v, float* slot) {
#if NORM_HAS_CLUSTERS
    cg::cluster_group cluster = cg::this_cluster();
    const int lane = threadIdx.x & 31;
    if (threadIdx.x == 0) *slot = v;
    cluster.sync();
    return warp_sum(lane < CLUSTER ? *cluster.map_shared_rank(slot, lane) : 0.f);
#else
    return v;
#endif
}

// [[snippet: row_sum]]
// Sum over the threads of one row (a warp, a block, or a cluster of blocks). `red` is a private
// [33] float buffer in shared memory for this one reduction (a second reduction needs another).
template <int TPR, int CLUSTER>
__device__ __forceinline__ float row_sum(float v, float* red) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31;
    if constexpr (TPR > 32) {
        if (lane == 0) red[threadIdx.x >> 5] = v;
        __syncthreads();
        v = warp_sum(lane < TPR / 32 ? red[lane] : 0.f);
    }
    if constexpr (CLUSTER > 1) v = cluster_sum<CLUSTER>(v, &red[32]);
    return v;
}

// Two sums over the threads of one row in one reduction: one block barrier and one cluster barrier
// for both (row_sum twice would pay each barrier twice). `red` is [2][33] in shared memory.
template <int TPR, int CLUSTER>
__device__ __forceinline__ float2 row_sum2(float2 v, float (*red)[33]) {
    v.x = warp_sum(v.x);
    v.y = warp_sum(v.y);
    const int lane = threadIdx.x & 31;
    if constexpr (TPR > 32) {
        if (lane == 0) { red[0][threadIdx.x >> 5] = v.x; red[1][threadIdx.x >> 5] = v.y; }
        __syncthreads();
        v.x = warp_sum(lane < TPR / 32 ? red[0][lane] : 0.f);
        v.y = warp_sum(lane < TPR / 32 ? red[1][lane] : 0.f);
    }
#if NORM_HAS_CLUSTERS
    if constexpr (CLUSTER > 1) {
        cg::cluster_group cluster = cg::this_cluster();
        if (threadIdx.x == 0) { red[0][32] = v.x; red[1][32] = v.y; }
        cluster.sync();
        v.x = warp_sum(lane < CLUSTER ? *cluster.map_shared_rank(&red[0][32], lane) : 0.f);
        v.y = warp_sum(lane < CLUSTER ? *cluster.map_shared_rank(&red[1][32], lane) : 0.f);
    }
#endif
    return v;
}
// [[/snippet]]

// Welford states merged over the threads of one row (welford.cuh); `red` is [33] in shared memory.
template <int TPR, int CLUSTER>
__device__ __forceinline__ Welford row_welford(Welford s, Welford* red) {
    if constexpr (TPR > 32) s = block_welford<TPR / 32>(s, red);
    else s = warp_welford(s);
#if NORM_HAS_CLUSTERS
    if constexpr (CLUSTER > 1) s = cluster_welford<CLUSTER>(s, &red[32]);
#endif
    return s;
}

// Where this thread's part of a row lies: rank r of the cluster, thread t of the row, access j at
//   col(j) = r * TPR * ITEMS + (j * TPR + t) * VEC + [0, VEC)
struct RowSlice {
    int rank, row, col0;                 // col(j) = col0 + j * TPR * VEC
    size_t base;                         // the row's first element
};

template <int VEC, int TPR, int THREADS, int ITEMS, int CLUSTER>
__device__ __forceinline__ RowSlice row_slice(int n) {
    static_assert(ITEMS % VEC == 0, "ITEMS must be a multiple of VEC");
    static_assert(TPR == 32 || TPR == THREADS, "a warp per row, or the whole block per row");
    static_assert(CLUSTER == 1 || TPR == THREADS, "a cluster splits one row over its blocks");
    static_assert(CLUSTER == 1 || NORM_HAS_CLUSTERS, "thread-block clusters need sm_90 or later");
    RowSlice rs;
    rs.rank = CLUSTER > 1 ? cluster_rank() : 0;
    rs.row = (blockIdx.x / CLUSTER) * (THREADS / TPR) + threadIdx.x / TPR;
    rs.base = (size_t)rs.row * n;
    rs.col0 = rs.rank * TPR * ITEMS + (int)(threadIdx.x % TPR) * VEC;
    return rs;
}
