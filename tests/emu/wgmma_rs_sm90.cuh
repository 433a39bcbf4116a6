// wgmma_rs_sm90.cuh stand-in for the CPU emulation: the register-sourced wgmma queued like the shared-memory one
// (tests/emu/wgmma_sm90.cuh), its A taken from the warpgroup's registers at the issue and checked unchanged when
// it runs at the thread's wait.
#pragma once
#include "wgmma_sm90.cuh"

template <int N, int TRANS_B>
inline void wgmma_m64nNk16_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long desc_b, int scale_d) {
    static_assert(N == 16 || N == 32 || N == 64, "the RS shapes instantiated in kernels/include/wgmma_rs_sm90.cuh");
    emu_wgmma_rs_issue(d, N, a, desc_b, scale_d, TRANS_B);
}
