// wgmma_sm90.cuh stand-in for the CPU emulation (see cuda_emu.h). A wgmma is queued per thread and runs when
// the thread waits for its group (wgmma_wait), the latest moment the hardware allows: a kernel that reads its
// accumulators, or lets a stage be overwritten, before the wait sees the difference. Each thread computes its
// own accumulator elements (the wgmma D layout) from the operands in shared memory, read through the
// descriptors' start address, LBO, SBO and the 128-byte swizzle exactly as hopper_common.cuh describes them.
#pragma once
#include <deque>
#include "cuda_emu.h"
#include "cuda_bf16.h"
#include "mma_sm80.cuh"

struct EmuWgmma { float* d; int n; unsigned long long da, db; int scale_d, trans_b; };
inline thread_local std::vector<EmuWgmma> emu_wgmma_open;
inline thread_local std::deque<std::vector<EmuWgmma>> emu_wgmma_groups;

inline void wgmma_fence() {}
inline void wgmma_commit() {
    emu_wgmma_groups.push_back(std::move(emu_wgmma_open));
    emu_wgmma_open.clear();
}

struct EmuDesc {
    unsigned start, lbo, sbo;
    explicit EmuDesc(unsigned long long d)
        : start(static_cast<unsigned>(d & 0x3FFF) << 4), lbo(static_cast<unsigned>((d >> 16) & 0x3FFF) << 4),
          sbo(static_cast<unsigned>((d >> 32) & 0x3FFF) << 4) {
        if ((d >> 62) != 1) emu_fail("wgmma: the emulation knows the 128-byte swizzle (layout type 1) only", nullptr);
    }
};

inline float emu_smem_bf16(unsigned byte) {
    const unsigned off = byte ^ (((byte >> 7) & 7) << 4);     // the 128-byte swizzle, on the address
    __nv_bfloat16 h;
    std::memcpy(&h, emu_smem_at(off), 2);
    return __bfloat162float(h);
}
// K-major (8 rows of 128 bytes per atom, atoms SBO apart): element (mn, k) of a 16-k slice
inline float emu_k_major(const EmuDesc& s, int mn, int k) {
    return emu_smem_bf16(s.start + (mn % 8) * 128 + (mn / 8) * s.sbo + (k / 8) * 16 + (k % 8) * 2);
}
// MN-major (a 128-byte row holds 64 mn of one k; 8 k rows per atom; 64-wide groups LBO apart, 8-k groups SBO)
inline float emu_mn_major(const EmuDesc& s, int mn, int k) {
    return emu_smem_bf16(s.start + ((mn % 64) / 8) * 16 + (mn / 64) * s.lbo + (k % 8) * 128 + (k / 8) * s.sbo +
                         (mn % 8) * 2);
}

inline void emu_wgmma_run(const EmuWgmma& op) {
    const EmuDesc a(op.da), b(op.db);
    const int tid = threadIdx.x % 128, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    for (int j = 0; j < op.n / 8; ++j)
        for (int i = 0; i < 4; ++i) {
            const int row = 16 * w + g + 8 * (i >> 1), col = 8 * j + 2 * t + (i & 1);
            float sum = 0.f;
            for (int k = 0; k < 16; ++k)
                sum += emu_k_major(a, row, k) * (op.trans_b ? emu_mn_major(b, col, k) : emu_k_major(b, col, k));
            op.d[4 * j + i] = (op.scale_d ? op.d[4 * j + i] : 0.f) + sum;
        }
}

template <int N>
inline void wgmma_wait() {
    while (emu_wgmma_groups.size() > static_cast<size_t>(N)) {
        for (const EmuWgmma& op : emu_wgmma_groups.front()) emu_wgmma_run(op);
        emu_wgmma_groups.pop_front();
    }
    if (emu_warpgroup == nullptr) emu_fail("wgmma_wait outside a launch with warpgroups", nullptr);
    emu_warpgroup->arrive_and_wait();
}

inline void warpgroup_sync() {
    if (emu_warpgroup == nullptr) emu_fail("warpgroup_sync outside a launch with warpgroups", nullptr);
    emu_warpgroup->arrive_and_wait();
}

template <int REGS> inline void setmaxnreg_dec() {}
template <int REGS> inline void setmaxnreg_inc() {}

template <int TRANS_B>
inline void wgmma_m64n128k16(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b, int scale_d) {
    emu_wgmma_open.push_back({d, 128, desc_a, desc_b, scale_d, TRANS_B});
}
template <int TRANS_B>
inline void wgmma_m64n256k16(float (&d)[128], unsigned long long desc_a, unsigned long long desc_b, int scale_d) {
    emu_wgmma_open.push_back({d, 256, desc_a, desc_b, scale_d, TRANS_B});
}
