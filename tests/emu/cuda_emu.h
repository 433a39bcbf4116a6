// cuda_emu.h: just enough CUDA to run the sgemm kernels on a CPU (tests/test_sgemm_emulated.py).
// One OS thread per CUDA thread of a block; the blocks of a grid run one after another, so a kernel's
// `__shared__` arrays (function-scope statics here) are the shared memory of the block that runs. Every
// thread runs every block in turn and waits at a barrier between blocks. __syncthreads is a real barrier
// of the block's threads, so a missing or misplaced one shows up as wrong results (not reliably: the OS
// schedules the threads, not a warp scheduler). Warp-level intrinsics and atomics are not emulated.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

struct dim3e { unsigned x = 0, y = 0, z = 0; };
inline thread_local dim3e threadIdx, blockIdx;
inline dim3e blockDim, gridDim;
inline std::barrier<>* emu_barrier = nullptr;

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
using std::max;
using std::min;

template <class Kernel, class... Args>
void emu_launch(Kernel kernel, dim3e grid, dim3e block, Args... args) {
    gridDim = grid;
    blockDim = block;
    const unsigned nt = block.x * block.y * block.z;
    std::barrier<> bar(nt);
    emu_barrier = &bar;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < nt; ++t)
        threads.emplace_back([=, &bar] {
            threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            for (unsigned z = 0; z < grid.z; ++z)
                for (unsigned y = 0; y < grid.y; ++y)
                    for (unsigned x = 0; x < grid.x; ++x) {
                        blockIdx = {x, y, z};
                        kernel(args...);
                        bar.arrive_and_wait();   // the next block reuses the statics: everyone is done
                    }
        });
    for (auto& th : threads) th.join();
}
