// cluster_sm90.cuh: what a 2-CTA cluster of chapter 12's GEMM needs (sm_90): the CTA's rank in its cluster, a
// barrier over every thread of the cluster, an mbarrier arrival on the peer CTA's barrier (its shared memory
// reached through the cluster's address window, mapa), and a TMA load multicast into the same offset of every
// CTA in a mask, completing its bytes on each destination's mbarrier at that offset.
// tests/emu/cluster_sm90.cuh is their CPU stand-in.
#pragma once
#include "tma_sm90.cuh"

__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

// Every thread of every CTA of the cluster arrives and waits: release what this thread wrote, acquire the rest.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// One arrival on the mbarrier at the same shared-memory offset as `bar`, in CTA `cta` of this cluster. The
// arrive keeps PTX's default semantics, release at CTA scope, as CUTLASS's ClusterBarrier::arrive(cta_id) does:
// what it announces (this warpgroup's wgmma reads of a stage are over) was already waited for. Spelled
// `.release.cluster` (define CLUSTER_ARRIVE_RELEASE_CLUSTER, as chapter 12 does to measure it), it compiles to
// MEMBAR.ALL.GPU before every arrival, a fence the consumers would wait on once per stage.
__device__ __forceinline__ void mbarrier_arrive_cluster(unsigned long long* bar, unsigned cta) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(bar)), "r"(cta));
#ifdef CLUSTER_ARRIVE_RELEASE_CLUSTER
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" :: "r"(remote) : "memory");
#else
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" :: "r"(remote) : "memory");
#endif
}

// One box into `dst` of every CTA whose bit is set in `mask`, each completing its bytes on its own mbarrier at
// `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TmaDescriptor* map, int col, int row,
                                                      unsigned long long* bar, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)),
                    "r"(col), "r"(row), "r"(smem_addr(bar)), "h"(mask)
                 : "memory");
}
