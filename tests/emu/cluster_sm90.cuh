// cluster_sm90.cuh stand-in for the CPU emulation: a cluster's blocks run at the same time here
// (emu_launch_cluster in cuda_emu.h), each with its own shared memory; the peer's barrier and shared memory are
// found at the same offset in the peer's buffer, as mapa finds them on the GPU.
#pragma once
#include "cuda_emu.h"
#include "tma_sm90.cuh"

#define __cluster_dims__(...)

inline unsigned cluster_ctarank() { return emu_cta_rank; }
inline void cluster_sync() {
    if (emu_cluster_barrier == nullptr) emu_fail("cluster_sync outside a cluster launch", nullptr);
    emu_cluster_barrier->arrive_and_wait();
}

inline unsigned char* emu_peer_smem(unsigned cta) {
    if (cta >= static_cast<unsigned>(EMU_MAX_CLUSTER)) emu_fail("a CTA rank outside the cluster", nullptr);
    return emu_smem_pool[cta];
}
template <class T>
inline T* emu_in_peer(T* p, unsigned cta) {
    return reinterpret_cast<T*>(emu_peer_smem(cta) + smem_addr(p));
}

inline void mbarrier_arrive_cluster(unsigned long long* bar, unsigned cta) { mbarrier_arrive(emu_in_peer(bar, cta)); }

inline void tma_load_2d_multicast(void* dst, const TmaDescriptor* map, int col, int row, unsigned long long* bar,
                                  unsigned short mask) {
    for (unsigned cta = 0; cta < static_cast<unsigned>(EMU_MAX_CLUSTER); ++cta)
        if (mask >> cta & 1)
            emu_tma_issue(emu_peer_smem(cta), emu_in_peer(static_cast<unsigned char*>(dst), cta), map, col, row,
                          emu_in_peer(bar, cta));
}
