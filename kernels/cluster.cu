// cluster.cu: chapter 3, thread block clusters and distributed shared memory (Hopper, sm_90).
//
// The exchange: G blocks in groups of N. Block b produces a partial tile P_b of TILE uint32
// (an integer hash of its global indices, standing in for a split-K GEMM tile or a split-KV
// attention output), and each group must be reduced: out[c, :] = sum of P_b over the N blocks of
// group c (mod 2^32). Block rank r of a group writes slice r of out[c]: TILE / N elements.
//
//   cluster_reduce_v0_produce + _combine_c{N} two launches: every block writes P_b to a global
//                                            workspace; a second kernel reads the N tiles back
//   cluster_reduce_v1_lastblock_c{N}         one launch, no clusters: every block writes P_b, then
//                                            counts itself in with an atomic; the group's last block
//                                            reduces the whole tile (nobody waits, so no deadlock)
//   cluster_reduce_v2_cluster_global_c{N}    one launch, a cluster of N per group: P_b through global
//                                            memory, cluster.sync() as the barrier, work split N ways
//   cluster_reduce_v3_dsmem_c{N}             one launch, a cluster of N: P_b stays in shared memory and
//                                            the peers read it through DSMEM (map_shared_rank)
//
//   cluster_whoami_c4                         every block of a 4-block cluster reports its rank, its
//                                            cluster and its SM
//   cluster_probe_c{1..16}                    empty kernels the driver's cluster occupancy is asked about
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define TILE 2048          // uint32 per block: its partial tile, 8 KB
#define CTHREADS 256

__device__ __forceinline__ int sm_id() {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

__device__ __forceinline__ unsigned cluster_id_x() {
    unsigned id;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(id));
    return id;
}

// The partial tile: a 32-bit integer mix of (seed, global index). Exact to check, costs nothing.
__device__ __forceinline__ unsigned payload(unsigned seed, unsigned idx) {
    unsigned h = idx * 0x9E3779B1u + seed;
    h ^= h >> 16; h *= 0x85EBCA6Bu;
    h ^= h >> 13; h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

// [[snippet: cluster_whoami]]
extern "C" __global__ void __cluster_dims__(4, 1, 1) cluster_whoami_c4(int* __restrict__ out) {
    // out: [G, 5] int32 = (blockIdx.x, rank in cluster, cluster id, blocks per cluster, SM)
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) {
        int* row = out + blockIdx.x * 5;
        row[0] = blockIdx.x;
        row[1] = (int)cluster.block_rank();
        row[2] = (int)cluster_id_x();
        row[3] = (int)cluster.num_blocks();
        row[4] = sm_id();
    }
}
// [[/snippet]]

// [[snippet: cluster_reduce_v0]]
extern "C" __global__ void __launch_bounds__(CTHREADS)
cluster_reduce_v0_produce(unsigned* __restrict__ work, unsigned seed) {
    // work: [G, TILE] global workspace; block b writes its partial tile to row b
    const unsigned b = blockIdx.x;
    for (int i = threadIdx.x; i < TILE; i += CTHREADS)
        work[(size_t)b * TILE + i] = payload(seed, b * TILE + i);
}

template <int N>
__device__ __forceinline__ void combine(const unsigned* __restrict__ work, unsigned* __restrict__ out) {
    // out: [G / N, TILE]; block b = c * N + r sums slice r of group c's N tiles
    const int c = blockIdx.x / N, r = blockIdx.x % N;
    constexpr int S = TILE / N;
#pragma unroll
    for (int j = threadIdx.x; j < S; j += CTHREADS) {
        const int i = r * S + j;
        unsigned acc = 0;
#pragma unroll
        for (int q = 0; q < N; ++q) acc += work[(size_t)(c * N + q) * TILE + i];
        out[(size_t)c * TILE + i] = acc;
    }
}
// [[/snippet]]

// [[snippet: cluster_reduce_v1]]
template <int N>
__device__ __forceinline__ void reduce_last_block(unsigned* work, unsigned* __restrict__ out,
                                                  unsigned* __restrict__ arrivals, unsigned seed) {
    // arrivals: [G / N] counters, zero before the launch and left zero after it
    __shared__ bool last;
    const unsigned b = blockIdx.x;
    const int c = blockIdx.x / N;
    for (int i = threadIdx.x; i < TILE; i += CTHREADS)
        work[(size_t)b * TILE + i] = payload(seed, b * TILE + i);
    __threadfence();                        // our tile is visible GPU-wide before we count ourselves in
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned arrived = atomicAdd(&arrivals[c], 1u);
        last = (arrived == N - 1);
        if (last) arrivals[c] = 0;          // every block of the group has counted: re-arm
        __threadfence();
    }
    __syncthreads();
    if (!last) return;                      // early blocks leave; nobody ever waits
#pragma unroll
    for (int i = threadIdx.x; i < TILE; i += CTHREADS) {
        unsigned acc = 0;
#pragma unroll
        for (int q = 0; q < N; ++q) acc += __ldcg(&work[(size_t)(c * N + q) * TILE + i]);
        out[(size_t)c * TILE + i] = acc;
    }
}
// [[/snippet]]

// [[snippet: cluster_reduce_v2]]
template <int N>
__device__ __forceinline__ void reduce_cluster_global(unsigned* work, unsigned* __restrict__ out,
                                                      unsigned seed) {
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned b = blockIdx.x;
    const int r = (int)cluster.block_rank();        // = blockIdx.x % N for a 1-D grid
    const int c = blockIdx.x / N;                   // = the cluster's index
    for (int i = threadIdx.x; i < TILE; i += CTHREADS)
        work[(size_t)b * TILE + i] = payload(seed, b * TILE + i);
    cluster.sync();                                 // release/acquire across the cluster's blocks
    constexpr int S = TILE / N;
#pragma unroll
    for (int j = threadIdx.x; j < S; j += CTHREADS) {
        const int i = r * S + j;
        unsigned acc = 0;
#pragma unroll
        for (int q = 0; q < N; ++q) acc += __ldcg(&work[(size_t)(c * N + q) * TILE + i]);
        out[(size_t)c * TILE + i] = acc;
    }
}
// [[/snippet]]

// [[snippet: cluster_reduce_v3]]
template <int N>
__device__ __forceinline__ void reduce_dsmem(unsigned* __restrict__ out, unsigned seed) {
    __shared__ unsigned tile[TILE];                 // [TILE] this block's partial, 8 KB
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned b = blockIdx.x;
    const int r = (int)cluster.block_rank();
    const int c = blockIdx.x / N;
    for (int i = threadIdx.x; i < TILE; i += CTHREADS) tile[i] = payload(seed, b * TILE + i);
    cluster.sync();                                 // every peer's tile is written
    const unsigned* peer[N];                        // the N tiles, as seen from this block
#pragma unroll
    for (int q = 0; q < N; ++q) peer[q] = cluster.map_shared_rank(tile, (r + q) % N);
    constexpr int S = TILE / N;
#pragma unroll
    for (int j = threadIdx.x; j < S; j += CTHREADS) {
        const int i = r * S + j;
        unsigned acc = 0;
#pragma unroll
        for (int q = 0; q < N; ++q) acc += peer[q][i];   // q = 0 is our own tile, the rest are remote
        out[(size_t)c * TILE + i] = acc;
    }
    cluster.sync();                                 // keep our tile alive until every peer has read it
}
// [[/snippet]]

// [[snippet: cluster_kernels]]
// One kernel per version and group size N: the same unrolled inner loops everywhere, so the versions
// differ only in where the tiles travel. v2 and v3 carry __cluster_dims__(N, 1, 1).
#define CLUSTER_REDUCE_KERNELS(N)                                                                  \
    extern "C" __global__ void __launch_bounds__(CTHREADS)                                         \
    cluster_reduce_v0_combine_c##N(const unsigned* work, unsigned* out) {                          \
        combine<N>(work, out);                                                                     \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(CTHREADS)                                         \
    cluster_reduce_v1_lastblock_c##N(unsigned* work, unsigned* out, unsigned* arrivals,            \
                                     unsigned seed) {                                              \
        reduce_last_block<N>(work, out, arrivals, seed);                                           \
    }                                                                                              \
    extern "C" __global__ void __cluster_dims__(N, 1, 1) __launch_bounds__(CTHREADS)               \
    cluster_reduce_v2_cluster_global_c##N(unsigned* work, unsigned* out, unsigned seed) {          \
        reduce_cluster_global<N>(work, out, seed);                                                 \
    }                                                                                              \
    extern "C" __global__ void __cluster_dims__(N, 1, 1) __launch_bounds__(CTHREADS)               \
    cluster_reduce_v3_dsmem_c##N(unsigned* out, unsigned seed) {                                   \
        reduce_dsmem<N>(out, seed);                                                                \
    }

CLUSTER_REDUCE_KERNELS(2)
CLUSTER_REDUCE_KERNELS(4)
CLUSTER_REDUCE_KERNELS(8)
// [[/snippet]]

// [[snippet: cluster_probe]]
// Occupancy probes: an empty kernel per cluster size N = 1..16 (16 is a non-portable size). The host
// launches nothing; it asks the driver (cuOccupancyMaxActiveClusters) how many clusters of N blocks,
// each block holding a whole SM's shared memory, the GPU places at once: that count reflects how the
// SMs are grouped into GPCs, since a cluster never spans two GPCs.
#define CLUSTER_PROBE(N) \
    extern "C" __global__ void __cluster_dims__(N, 1, 1) cluster_probe_c##N() { }
CLUSTER_PROBE(1)  CLUSTER_PROBE(2)  CLUSTER_PROBE(3)  CLUSTER_PROBE(4)
CLUSTER_PROBE(5)  CLUSTER_PROBE(6)  CLUSTER_PROBE(7)  CLUSTER_PROBE(8)
CLUSTER_PROBE(9)  CLUSTER_PROBE(10) CLUSTER_PROBE(11) CLUSTER_PROBE(12)
CLUSTER_PROBE(13) CLUSTER_PROBE(14) CLUSTER_PROBE(15) CLUSTER_PROBE(16)
// [[/snippet]]
