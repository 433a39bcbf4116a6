// welford.cuh: the Welford state (n, mean, M2) of a set of values and the parallel merge of two
// states (Chan, Golub and LeVeque 1979), with warp, block and cluster reductions built on it.
// Every lane of a reduced group ends with the bit-identical state: each merge is done in a fixed
// order (lower lane first), so a row is normalized with one mean and one rstd, not 32 near-copies.
#pragma once
#include <cooperative_groups.h>
#include "common.cuh"

// [[snippet: welford_merge]]
// State of a partition: n values, their mean, and M2 = sum (x_i - mean)^2. var = M2 / n.
struct Welford {
    float n, mean, m2;
};

// Merge of two disjoint partitions A and B (Chan et al.): with delta = mean_B - mean_A,
//   n = n_A + n_B,  mean = mean_A + delta * n_B / n,  M2 = M2_A + M2_B + delta^2 * n_A * n_B / n.
// An empty side (n = 0) leaves the other unchanged; two empty sides stay empty.
__device__ __forceinline__ Welford welford_merge(const Welford a, const Welford b) {
    const float n = a.n + b.n;
    const float wb = n > 0.f ? b.n / n : 0.f;   // n_B / n
    const float delta = b.mean - a.mean;
    return Welford{n, fmaf(delta, wb, a.mean), a.m2 + b.m2 + delta * delta * a.n * wb};
}

// One incremental (Welford) step with a precomputed 1 / n, n being the count after adding x.
__device__ __forceinline__ void welford_push(Welford& s, float x, float inv_n) {
    s.n += 1.f;
    const float d = x - s.mean;
    s.mean = fmaf(d, inv_n, s.mean);
    s.m2 = fmaf(d, x - s.mean, s.m2);
}

// Butterfly merge over the 32 lanes of a warp. At each step the lane whose `offset` bit is clear
// holds the lower partition; both partners evaluate merge(lower, upper), so they agree bit for bit.
__device__ __forceinline__ Welford warp_welford(Welford s) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        Welford o;
        o.n = __shfl_xor_sync(FULL_MASK, s.n, offset);
        o.mean = __shfl_xor_sync(FULL_MASK, s.mean, offset);
        o.m2 = __shfl_xor_sync(FULL_MASK, s.m2, offset);
        s = (lane & offset) ? welford_merge(o, s) : welford_merge(s, o);
    }
    return s;
}

// Merge over the WARPS warps of a block: warp states through shared memory [WARPS], then every
// warp merges all of them in the same order (no second barrier to broadcast a result).
template <int WARPS>
__device__ __forceinline__ Welford block_welford(Welford s, Welford* red /* [32] in smem */) {
    s = warp_welford(s);
    if (WARPS == 1) return s;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = s;
    __syncthreads();
    const Welford t = lane < WARPS ? red[lane] : Welford{0.f, 0.f, 0.f};
    return warp_welford(t);
}

// Merge over the CLUSTER blocks of a thread-block cluster through distributed shared memory:
// thread 0 of each block publishes its block's state in `slot`, and lane r of every warp reads
// rank r's slot. The caller must cluster.sync() again before exiting (a block's shared memory
// must outlive the reads of the other blocks).
// Clusters exist from sm_90 on: on an older arch this function is not declared.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
template <int CLUSTER>
__device__ __forceinline__ Welford cluster_welford(Welford s, Welford* slot /* one, in smem */) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const int lane = threadIdx.x & 31;
    if (threadIdx.x == 0) *slot = s;
    cluster.sync();
    const Welford t = lane < CLUSTER ? *cluster.map_shared_rank(slot, lane) : Welford{0.f, 0.f, 0.f};
    return warp_welford(t);
}
#endif
// [[/snippet]]
