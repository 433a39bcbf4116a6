// wgmma_sm90.cuh stand-in for the CPU emulation (see cuda_emu.h). A wgmma is queued per thread and runs when
// the thread waits for its group (wgmma_wait), the latest moment the hardware allows: a kernel that reads its
// accumulators, or lets a stage be overwritten, before the wait sees the difference. Each thread computes its
// own accumulator elements (the wgmma D layout) from the operands in shared memory, read through the
// descriptors' start address, LBO, SBO and the 128-byte swizzle exactly as hopper_common.cuh describes them.
// The register-sourced form (wgmma_rs_sm90.cuh's stand-in) takes A from the threads' registers instead: the issue
// is a warpgroup collective that snapshots every thread's four A registers (EmuRegA), and the run checks that the
// issuing thread's registers still hold what it issued (PTX: A's registers belong to the wgmma until its wait).
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include "cuda_emu.h"
#include "cuda_bf16.h"
#include "mma_sm80.cuh"

struct EmuRegA { unsigned a[128][4]; };   // a warpgroup's A registers at the issue, by thread of the warpgroup
struct EmuWgmma {
    float* d; int n; unsigned long long da, db; int scale_d, trans_b;
    std::shared_ptr<const EmuRegA> ra = nullptr;   // the RS form: A from registers (da unused)
    const unsigned* regs = nullptr;                // ... and this thread's registers, checked at the run
};
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

// Element (row, k) of an RS wgmma's A: the register of the thread that holds it in the fragment layout
// (wgmma_rs_sm90.cuh): warp row / 16, lane 4 (row % 8) + (k % 8) / 2, register (row % 16 >= 8) + 2 (k >= 8),
// half k % 2.
inline float emu_reg_a(const EmuRegA& ra, int row, int k) {
    const int tid = 32 * (row / 16) + 4 * (row % 8) + (k % 8) / 2;
    return emu_bf16_half(ra.a[tid][(row % 16 >= 8) + 2 * (k >= 8)], k % 2);
}

inline void emu_wgmma_run(const EmuWgmma& op) {
    if (op.ra && !std::equal(op.regs, op.regs + 4, op.ra->a[threadIdx.x % 128]))
        emu_fail("wgmma (RS): A's registers were written before a wgmma_wait covered the wgmma", op.regs);
    const int tid = threadIdx.x % 128, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const EmuDesc b(op.db), a = op.ra ? b : EmuDesc(op.da);   // (the RS form has no descriptor of A)
    auto a_at = [&](int row, int k) { return op.ra ? emu_reg_a(*op.ra, row, k) : emu_k_major(a, row, k); };
    for (int j = 0; j < op.n / 8; ++j)
        for (int i = 0; i < 4; ++i) {
            const int row = 16 * w + g + 8 * (i >> 1), col = 8 * j + 2 * t + (i & 1);
            float sum = 0.f;
            for (int k = 0; k < 16; ++k)
                sum += a_at(row, k) * (op.trans_b ? emu_mn_major(b, col, k) : emu_k_major(b, col, k));
            op.d[4 * j + i] = (op.scale_d ? op.d[4 * j + i] : 0.f) + sum;
        }
}

// The issue of an RS wgmma, a warpgroup collective (.sync.aligned): every thread puts its A registers into the
// snapshot of this issue (the k-th RS issue of each thread of a warpgroup is the same wgmma), all meet, and each
// queues the wgmma with the shared snapshot and a pointer to its own registers.
inline std::mutex emu_rs_mutex;
inline std::map<std::pair<const void*, unsigned long long>, std::shared_ptr<EmuRegA>> emu_rs_issuing;
inline thread_local unsigned long long emu_rs_issued = 0;   // per thread of a launch (threads are made per launch)

inline void emu_wgmma_rs_issue(float* d, int n, const unsigned (&a)[4], unsigned long long desc_b, int scale_d,
                               int trans_b) {
    if (emu_warpgroup == nullptr) emu_fail("wgmma (RS) outside a launch with warpgroups", nullptr);
    if (n < 8 || n > 256 || n % 8) emu_fail("wgmma: n must be a multiple of 8 from 8 to 256", nullptr);
    const auto key = std::make_pair(static_cast<const void*>(emu_warpgroup), emu_rs_issued++);
    std::shared_ptr<EmuRegA> snap;
    {
        std::lock_guard<std::mutex> lock(emu_rs_mutex);
        auto& slot = emu_rs_issuing[key];
        if (!slot) slot = std::make_shared<EmuRegA>();
        snap = slot;
    }
    std::copy(a, a + 4, snap->a[threadIdx.x % 128]);
    emu_warpgroup->arrive_and_wait();                      // every thread's registers are in
    if (threadIdx.x % 128 == 0) {
        std::lock_guard<std::mutex> lock(emu_rs_mutex);
        emu_rs_issuing.erase(key);                         // each thread holds the snapshot already
    }
    emu_wgmma_open.push_back({d, n, 0, desc_b, scale_d, trans_b, snap, a});
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
