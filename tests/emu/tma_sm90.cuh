// tma_sm90.cuh stand-in for the CPU emulation (see cuda_emu.h): the mbarrier is the real 64-bit word, updated
// atomically (expected arrivals, pending arrivals, phase, pending transaction bytes); a TMA load copies a box
// from global memory with the 128-byte swizzle applied to the shared-memory offset, zeros outside the tensor,
// and completes its bytes on the barrier. When the bytes land depends on emu_tma_policy: at the issue
// (EMU_TMA_AT_ISSUE: a consumer that releases a stage too early sees it overwritten) or only once some thread
// waits on the barrier (EMU_TMA_AT_WAIT: a consumer that reads a stage without waiting reads stale bytes).
#pragma once
#include <atomic>
#include <mutex>
#include <unordered_map>
#include "cuda_emu.h"
#include "mma_sm80.cuh"

#define __grid_constant__

enum EmuTmaPolicy { EMU_TMA_AT_ISSUE, EMU_TMA_AT_WAIT };
inline EmuTmaPolicy emu_tma_policy = EMU_TMA_AT_WAIT;

// The emulated tensor map: what the test driver knows from the plan's utils.tma.TiledSpec.
struct alignas(64) TmaDescriptor {
    const unsigned char* base;
    long long cols, rows;          // global sizes, innermost first as the driver counts them
    long long row_bytes;           // global stride of a row
    int box_cols, box_rows;
    int elem_bytes;
    int swizzle;                   // bytes: 0 or 128
    unsigned char pad[128 - 48];
};
static_assert(sizeof(TmaDescriptor) == 128, "a tensor map is 128 bytes");

struct EmuTmaCopy { unsigned char* base; unsigned char* dst; TmaDescriptor map; int col, row; };   // base: the
                                                                                                // destination block's smem
inline std::mutex emu_tma_mutex;
inline std::unordered_map<unsigned long long*, std::vector<EmuTmaCopy>> emu_tma_pending;

// --- mbarrier: bits 0-10 expected arrivals, 11-21 pending arrivals, 22 phase parity, 32-63 pending bytes ---
inline uint64_t emu_bar_pack(uint64_t expected, uint64_t pending, uint64_t phase, int64_t tx) {
    return expected | (pending << 11) | (phase << 22) | (static_cast<uint64_t>(static_cast<uint32_t>(tx)) << 32);
}
inline void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
    {   // a barrier initialised again (the next block of a sequential launch) starts with nothing pending
        std::lock_guard<std::mutex> lock(emu_tma_mutex);
        emu_tma_pending.erase(bar);
    }
    if (arrivals == 0 || arrivals >= 2048) emu_fail("mbarrier_init: arrival count out of range", bar);
    std::atomic_ref<unsigned long long>(*bar).store(emu_bar_pack(arrivals, arrivals, 0, 0));
}
inline void fence_barrier_init() {}
inline void fence_proxy_async_smem() {}

// Apply `arrivals` arrivals and `tx` transaction bytes (negative: bytes landed); flip the phase when both
// counts reach zero.
inline void emu_bar_update(unsigned long long* bar, unsigned arrivals, long long tx) {
    std::atomic_ref<unsigned long long> word(*bar);
    unsigned long long old = word.load();
    for (;;) {
        const uint64_t expected = old & 0x7FF, phase = (old >> 22) & 1;
        long long pending = static_cast<long long>((old >> 11) & 0x7FF) - arrivals;
        long long bytes = static_cast<int32_t>(old >> 32) + tx;
        if (pending < 0) emu_fail("mbarrier: more arrivals than the phase expects", bar);
        unsigned long long next;
        if (pending == 0 && bytes == 0) next = emu_bar_pack(expected, expected, phase ^ 1, 0);
        else next = emu_bar_pack(expected, pending, phase, bytes);
        if (word.compare_exchange_weak(old, next)) return;
    }
}
inline void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) { emu_bar_update(bar, 1, bytes); }
inline void mbarrier_arrive(unsigned long long* bar) { emu_bar_update(bar, 1, 0); }

// --- TMA ---------------------------------------------------------------------------------------------------

inline unsigned emu_swizzle(unsigned offset, int swizzle) {
    return swizzle == 128 ? offset ^ (((offset >> 7) & 7) << 4) : offset;
}

inline int emu_tma_land(const EmuTmaCopy& c) {   // returns the bytes the box counts for
    const TmaDescriptor& m = c.map;
    const int row_bytes_smem = m.box_cols * m.elem_bytes;
    if (m.swizzle == 128 && row_bytes_smem != 128) emu_fail("TMA: the emulation takes 128-byte box rows with the 128-byte swizzle", c.dst);
    const unsigned base = smem_offset_in(c.base, c.dst);
    if (m.swizzle == 128 && base % 1024) emu_fail("TMA: a 128-byte swizzled box must start 1024-byte aligned", c.dst);
    for (int r = 0; r < m.box_rows; ++r)
        for (int e = 0; e < m.box_cols; ++e) {
            const long long gr = c.row + r, gc = c.col + e;
            const unsigned off = emu_swizzle(base + r * row_bytes_smem + e * m.elem_bytes, m.swizzle);
            unsigned char* dst = c.base + off;
            if (gr >= 0 && gr < m.rows && gc >= 0 && gc < m.cols)
                std::memcpy(dst, m.base + gr * m.row_bytes + gc * m.elem_bytes, m.elem_bytes);
            else
                std::memset(dst, 0, m.elem_bytes);
        }
    return m.box_rows * row_bytes_smem;
}

inline void emu_tma_issue(unsigned char* base, void* dst, const TmaDescriptor* map, int col, int row,
                          unsigned long long* bar) {
    EmuTmaCopy c{base, static_cast<unsigned char*>(dst), *map, col, row};
    if (emu_tma_policy == EMU_TMA_AT_ISSUE) {
        const int bytes = emu_tma_land(c);
        emu_bar_update(bar, 0, -bytes);
        return;
    }
    std::lock_guard<std::mutex> lock(emu_tma_mutex);
    emu_tma_pending[bar].push_back(c);
}

inline void tma_load_2d(void* dst, const TmaDescriptor* map, int col, int row, unsigned long long* bar) {
    emu_tma_issue(emu_smem, dst, map, col, row, bar);
}

inline void emu_tma_land_pending(unsigned long long* bar) {
    std::vector<EmuTmaCopy> todo;
    {
        std::lock_guard<std::mutex> lock(emu_tma_mutex);
        auto it = emu_tma_pending.find(bar);
        if (it == emu_tma_pending.end()) return;
        todo.swap(it->second);
        emu_tma_pending.erase(it);
    }
    for (const EmuTmaCopy& c : todo) emu_bar_update(bar, 0, -emu_tma_land(c));
}

// The phase of parity `phase` has completed when the barrier's current parity differs from it. Copies still
// pending on the barrier land only when the waiter would otherwise block: a wait on a phase that completed
// long ago (a wrong parity) passes at once, before this stage's bytes are there, as on the GPU.
inline bool emu_phase_done(unsigned long long* bar, unsigned phase) {
    return ((std::atomic_ref<unsigned long long>(*bar).load() >> 22) & 1) != (phase & 1);
}
inline bool mbarrier_try_wait(unsigned long long* bar, unsigned phase) {
    if (emu_phase_done(bar, phase)) return true;
    emu_tma_land_pending(bar);
    if (emu_phase_done(bar, phase)) return true;
    std::this_thread::yield();
    return false;
}
inline void mbarrier_wait(unsigned long long* bar, unsigned phase) {
    while (!mbarrier_try_wait(bar, phase)) {
    }
}

// TMA stores: done at the issue (the emulation has no copy engine running behind the thread), clipped at the
// tensor's edges, reading the box from shared memory through the same swizzle as a load.
inline void tma_store_2d(const TmaDescriptor* map, int col, int row, const void* src) {
    const TmaDescriptor& m = *map;
    const int row_bytes_smem = m.box_cols * m.elem_bytes;
    if (m.swizzle == 128 && row_bytes_smem != 128) emu_fail("TMA store: 128-byte box rows expected with the swizzle", src);
    const unsigned base = smem_addr(src);
    if (m.swizzle == 128 && base % 1024) emu_fail("TMA store: a 128-byte swizzled box must start 1024-byte aligned", src);
    unsigned char* out = const_cast<unsigned char*>(m.base);
    for (int r = 0; r < m.box_rows; ++r)
        for (int e = 0; e < m.box_cols; ++e) {
            const long long gr = row + r, gc = col + e;
            if (gr < 0 || gr >= m.rows || gc < 0 || gc >= m.cols) continue;
            const unsigned off = emu_swizzle(base + r * row_bytes_smem + e * m.elem_bytes, m.swizzle);
            std::memcpy(out + gr * m.row_bytes + gc * m.elem_bytes, emu_smem_at(off), m.elem_bytes);
        }
}
inline void tma_store_commit() {}
template <int N> inline void tma_store_wait_read() {}
inline void tma_store_wait_all() {}
