// cuda_emu.h: just enough CUDA to run the sgemm kernels on a CPU (tests/test_sgemm_emulated.py).
// One OS thread per CUDA thread of a block; the blocks of a grid run one after another, so a kernel's
// `__shared__` arrays (function-scope statics here) are the shared memory of the block that runs. Every
// thread runs every block in turn and waits at a barrier between blocks. __syncthreads is a real barrier
// of the block's threads, so a missing or misplaced one shows up as wrong results (not reliably: the OS
// schedules the threads, not a warp scheduler). atomicAdd on unsigned is a real atomic. Warp-collective operations
// (__syncwarp, and the mma/ldmatrix/wmma stand-ins in mma_sm80.cuh, ldmatrix_sm80.cuh and mma.h beside
// this file) meet at a barrier of the warp's 32 threads and exchange registers through the warp's slots.
// cp.async (mma_sm80.cuh here) is deferred: a copy lands only when its thread waits for its group, the
// latest moment the hardware allows, so a kernel that reads a stage before waiting reads stale data.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

struct dim3e { unsigned x = 0, y = 0, z = 0; };
inline thread_local dim3e threadIdx, blockIdx;
inline dim3e blockDim, gridDim;
inline thread_local std::barrier<>* emu_barrier = nullptr;   // this thread's block

#define __syncthreads() emu_barrier->arrive_and_wait()
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))

struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }

// --- warps -------------------------------------------------------------------------------------------
struct EmuWarp {
    explicit EmuWarp(unsigned lanes) : bar(lanes) {}
    std::barrier<> bar;
    uint64_t slot[32][8];   // what each lane hands to a collective operation
};
inline thread_local EmuWarp* emu_warp = nullptr;
inline thread_local std::barrier<>* emu_warpgroup = nullptr;   // the 128 threads of this thread's warpgroup
inline thread_local unsigned emu_lane = 0;
inline void emu_warp_sync() { emu_warp->bar.arrive_and_wait(); }
#define __syncwarp(...) emu_warp_sync()

[[noreturn]] inline void emu_fail(const char* what, const void* p) {
    std::fprintf(stderr, "emulated CUDA: %s (address %p)\n", what, p);
    std::abort();
}
inline void emu_expect_aligned(const void* p, unsigned bytes, const char* what) {
    if (reinterpret_cast<uintptr_t>(p) % bytes) emu_fail(what, p);
}

// Dynamic shared memory: the test driver rewrites `extern __shared__ T name[];` to `emu_smem`, this thread's
// block's buffer. Blocks run one after another and share buffer 0, except the blocks of one cluster, which run
// at the same time, each with its own (cluster rank r: buffer r).
constexpr int EMU_MAX_CLUSTER = 2;
constexpr unsigned EMU_SMEM_BYTES = 232448;
alignas(1024) inline unsigned char emu_smem_pool[EMU_MAX_CLUSTER][EMU_SMEM_BYTES];
inline thread_local unsigned char* emu_smem = emu_smem_pool[0];
inline thread_local unsigned emu_cta_rank = 0;
inline std::barrier<>* emu_cluster_barrier = nullptr;

// --- cp.async: per thread, copies grouped by commit, applied when waited for ----------------------------
struct EmuCopy { void* dst; const void* src; int bytes, size; };
inline thread_local std::vector<EmuCopy> emu_open_copies;
inline thread_local std::deque<std::vector<EmuCopy>> emu_copy_groups;
inline void emu_commit_copies() {
    emu_copy_groups.push_back(std::move(emu_open_copies));
    emu_open_copies.clear();
}
inline void emu_land_copies(size_t keep) {   // land the oldest groups until at most `keep` are in flight
    while (emu_copy_groups.size() > keep) {
        for (const EmuCopy& c : emu_copy_groups.front()) {
            std::memset(c.dst, 0, c.size);
            if (c.bytes) std::memcpy(c.dst, c.src, c.bytes);
        }
        emu_copy_groups.pop_front();
    }
}
using std::max;
using std::min;

template <class Kernel, class... Args>
void emu_launch(Kernel kernel, dim3e grid, dim3e block, Args... args) {
    gridDim = grid;
    blockDim = block;
    const unsigned nt = block.x * block.y * block.z;
    std::barrier<> bar(nt);
    std::vector<std::unique_ptr<EmuWarp>> warps;
    for (unsigned w = 0; w * 32 < nt; ++w) warps.push_back(std::make_unique<EmuWarp>(std::min(32u, nt - w * 32)));
    std::vector<std::unique_ptr<std::barrier<>>> warpgroups;
    for (unsigned g = 0; g * 128 < nt; ++g) warpgroups.push_back(std::make_unique<std::barrier<>>(std::min(128u, nt - g * 128)));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < nt; ++t)
        threads.emplace_back([=, &bar, &warps, &warpgroups] {
            threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            emu_barrier = &bar;
            emu_warpgroup = warpgroups[t / 128].get();
            emu_warp = warps[t / 32].get();
            emu_lane = t % 32;
            for (unsigned z = 0; z < grid.z; ++z)
                for (unsigned y = 0; y < grid.y; ++y)
                    for (unsigned x = 0; x < grid.x; ++x) {
                        blockIdx = {x, y, z};
                        kernel(args...);
                        emu_commit_copies();   // a block's copies complete before it retires
                        emu_land_copies(0);
                        bar.arrive_and_wait();   // the next block reuses the statics: everyone is done
                    }
        });
    for (auto& th : threads) th.join();
}

// A kernel compiled with __cluster_dims__(CS, 1, 1): the CS blocks of each cluster run at the same time (each its
// own threads, block barrier, warps and shared memory; a cluster-wide barrier for cluster_sync), the clusters
// one after another. Static __shared__ variables would be shared by the cluster's blocks here: cluster kernels
// keep everything in dynamic shared memory.
template <int CS, class Kernel, class... Args>
void emu_launch_cluster(Kernel kernel, dim3e grid, dim3e block, Args... args) {
    static_assert(CS >= 1 && CS <= EMU_MAX_CLUSTER, "cluster size the emulation holds");
    if (grid.x % CS || grid.y != 1 || grid.z != 1) emu_fail("cluster launch: grid.x must be a multiple of the cluster", nullptr);
    gridDim = grid;
    blockDim = block;
    const unsigned nt = block.x * block.y * block.z;
    for (unsigned cluster = 0; cluster < grid.x / CS; ++cluster) {
        std::barrier<> cluster_bar(CS * nt);
        emu_cluster_barrier = &cluster_bar;
        std::vector<std::unique_ptr<std::barrier<>>> block_bars, warpgroups;
        std::vector<std::unique_ptr<EmuWarp>> warps;
        for (int r = 0; r < CS; ++r) {
            block_bars.push_back(std::make_unique<std::barrier<>>(nt));
            for (unsigned w = 0; w * 32 < nt; ++w) warps.push_back(std::make_unique<EmuWarp>(std::min(32u, nt - w * 32)));
            for (unsigned g = 0; g * 128 < nt; ++g)
                warpgroups.push_back(std::make_unique<std::barrier<>>(std::min(128u, nt - g * 128)));
        }
        const unsigned warps_per_block = (nt + 31) / 32, groups_per_block = (nt + 127) / 128;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < CS * nt; ++t)
            threads.emplace_back([=, &block_bars, &warps, &warpgroups] {
                const unsigned r = t / nt, local = t % nt;
                threadIdx = {local % block.x, (local / block.x) % block.y, local / (block.x * block.y)};
                blockIdx = {cluster * CS + r, 0, 0};
                emu_barrier = block_bars[r].get();
                emu_warpgroup = warpgroups[r * groups_per_block + local / 128].get();
                emu_warp = warps[r * warps_per_block + local / 32].get();
                emu_lane = local % 32;
                emu_smem = emu_smem_pool[r];
                emu_cta_rank = r;
                kernel(args...);
                emu_commit_copies();
                emu_land_copies(0);
            });
        for (auto& th : threads) th.join();
    }
    emu_cluster_barrier = nullptr;
}

// --- what chapter 9's headers use (common.cuh, quant_common.cuh, int4.cuh, gemv_common.cuh), so that kernels that
// reuse them compile here (tests/test_w4a16_sm90_emulated.py). Blocks run one after another, so the cache-hinted
// loads are plain loads and the fences order only this process's threads. -------------------------------------
#define __host__
struct alignas(8) float2 { float x, y; };
struct alignas(8) uint2 { unsigned x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
inline float __uint_as_float(unsigned u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned>(i)); }
// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes {y, x} (x the low four).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t bytes = (uint64_t(y) << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= unsigned((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline long long clock64() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
// A warp collective through the warp's slots: every lane hands its value in, then reads its partner's.
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    emu_warp->slot[emu_lane][0] = bits;
    emu_warp_sync();
    bits = static_cast<uint32_t>(emu_warp->slot[emu_lane ^ lane_mask][0]);
    emu_warp_sync();
    std::memcpy(&v, &bits, 4);
    return v;
}
// lop3.b32 for the truth table LUT (int4.cuh's lop3 runs this here): bit i of LUT is f(a, b, c) for the bits
// a = i >> 2 & 1, b = i >> 1 & 1, c = i & 1 (LUT = f(0xF0, 0xCC, 0xAA)).
template <int LUT>
inline unsigned emu_lop3(unsigned a, unsigned b, unsigned c) {
    unsigned d = 0;
    for (int i = 0; i < 8; ++i)
        if (LUT >> i & 1) d |= (i & 4 ? a : ~a) & (i & 2 ? b : ~b) & (i & 1 ? c : ~c);
    return d;
}
