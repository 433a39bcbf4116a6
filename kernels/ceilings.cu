// ceilings.cu: the probes chapter 2 measures the GPU's ceilings with.
//
// Not one operator in numbered versions but one kernel per unit, each the simplest code that keeps
// that unit busy and nothing else. Every probe writes a result, so the compiler can drop no work, and
// the host side (ceilings.py) checks that result against a reference before any timing.
//
//   copy_v1_vec4       HBM copy: one wave of blocks, grid-stride over float4, COPY_UNROLL independent
//                      16-byte loads in flight before the first store; the n % 4 tail by the first threads
//   copy_v2_vec4_blocks  the same bytes, one float4 per thread and no loop: the grid covers the array and
//                      the block scheduler walks it in order (fewer loads in flight, better DRAM order)
//   read_v1_vec4       HBM / L2 read: the same access pattern with the loads summed, one partial sum per
//                      block; `repeats` passes over the buffer in one flat index space, so a buffer that
//                      fits in L2 is read many times per launch with loads of successive passes in flight
//   smem_read_v1_vec4  shared memory: conflict-free 16-byte loads (ld.volatile.shared.v4, so none can be
//                      hoisted or merged) in a loop, summed per thread; SM clock probe around the loop
//   fma_v1_chains      FP32: FMA_CHAINS independent FMA chains per thread, FMA_UNROLL steps per loop trip;
//                      SM clock probe around the loop
//
// Launch shapes (ceilings.py): every kernel but copy_v2 carries __launch_bounds__(threads, blocks per SM)
// so that ptxas keeps registers low enough for a full SM, and the host launches exactly SMs x that many
// blocks: one wave, every SM the same work. copy_v2 launches one block per 256 float4s instead.
#include "common.cuh"

constexpr int COPY_THREADS = 256;
constexpr int COPY_UNROLL = 4;
constexpr int READ_THREADS = 256;
constexpr int READ_UNROLL = 4;
constexpr int SMEM_THREADS = 1024;
constexpr int SMEM_UNROLL = 8;
constexpr int FMA_THREADS = 256;
constexpr int FMA_CHAINS = 8;
constexpr int FMA_UNROLL = 32;

// Nanoseconds from the GPU's global timer (coarse ticks; fine over a millisecond).
__device__ __forceinline__ unsigned long long globaltimer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One 16-byte shared-memory load that the compiler must issue every time it appears.
__device__ __forceinline__ float4 lds128_volatile(unsigned addr) {
    float4 v;
    asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void add4(float4& acc, const float4& v) {
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
}

// [[snippet: copy_v1]]
// src, dst: [n] floats, 16-byte aligned. One wave of blocks; thread t copies float4 number t, t + stride,
// t + 2 stride, ...: COPY_UNROLL independent 16-byte loads leave before the first store.
extern "C" __global__ void __launch_bounds__(COPY_THREADS, 8)
copy_v1_vec4(const float* __restrict__ src, float* __restrict__ dst, unsigned long long n)
{
    const float4* src4 = reinterpret_cast<const float4*>(src);
    float4* dst4 = reinterpret_cast<float4*>(dst);
    const unsigned long long n4 = n / 4;                                  // whole float4s
    const unsigned long long stride = (unsigned long long)gridDim.x * COPY_THREADS;
    const unsigned long long t = (unsigned long long)blockIdx.x * COPY_THREADS + threadIdx.x;
    unsigned long long i = t;
    for (; i + (COPY_UNROLL - 1) * stride < n4; i += COPY_UNROLL * stride) {
        float4 v[COPY_UNROLL];                                            // [COPY_UNROLL] float4 in registers
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; ++u) v[u] = src4[i + u * stride];
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; ++u) dst4[i + u * stride] = v[u];
    }
    for (; i < n4; i += stride) dst4[i] = src4[i];                        // fewer than COPY_UNROLL left
    if (t < n - 4 * n4) dst[4 * n4 + t] = src[4 * n4 + t];                // the n % 4 tail
}
// [[/snippet]]

// [[snippet: copy_v2]]
// One float4 per thread and no loop: block b copies float4s [256 b, 256 b + 256), the grid covers the
// whole array. Blocks start in order as earlier ones finish, so at any moment the resident blocks work
// on one narrow window that sweeps the array from front to back.
extern "C" __global__ void __launch_bounds__(COPY_THREADS)
copy_v2_vec4_blocks(const float* __restrict__ src, float* __restrict__ dst, unsigned long long n)
{
    const float4* src4 = reinterpret_cast<const float4*>(src);
    float4* dst4 = reinterpret_cast<float4*>(dst);
    const unsigned long long n4 = n / 4;
    const unsigned long long i = (unsigned long long)blockIdx.x * COPY_THREADS + threadIdx.x;
    if (i < n4) dst4[i] = src4[i];
    if (i < n - 4 * n4) dst[4 * n4 + i] = src[4 * n4 + i];                // the n % 4 tail, first threads
}
// [[/snippet]]

// [[snippet: read_v1]]
// src: [n] floats, 16-byte aligned; partial: [gridDim.x] floats, one sum per block.
// Thread t reads float4 number (j mod n4) for j = t, t + stride, ... < repeats * n4: with repeats > 1 the
// passes over the buffer follow each other in one index space, so loads of the next pass are already
// in flight while the last ones of this pass return. __ldcg caches in L2 only: repeated passes must be
// served by L2, not by the SM's L1.
extern "C" __global__ void __launch_bounds__(READ_THREADS, 8)
read_v1_vec4(const float* __restrict__ src, unsigned long long n, int repeats, float* __restrict__ partial)
{
    const float4* src4 = reinterpret_cast<const float4*>(src);
    const unsigned n4 = (unsigned)(n / 4);                 // the launcher keeps repeats * n4 < 2^32
    const unsigned stride = gridDim.x * READ_THREADS;
    const unsigned t = blockIdx.x * READ_THREADS + threadIdx.x;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (n4 > 0) {
        const unsigned total = (unsigned)repeats * n4;
        const unsigned step = stride % n4;                 // idx advances by stride, wrapping at n4
        unsigned idx = t % n4;
        unsigned j = t;
        for (; j + (READ_UNROLL - 1) * stride < total; j += READ_UNROLL * stride) {
            float4 v[READ_UNROLL];
#pragma unroll
            for (int u = 0; u < READ_UNROLL; ++u) {
                v[u] = __ldcg(src4 + idx);
                idx += step;
                if (idx >= n4) idx -= n4;
            }
#pragma unroll
            for (int u = 0; u < READ_UNROLL; ++u) add4(acc, v[u]);
        }
        for (; j < total; j += stride) {
            add4(acc, __ldcg(src4 + idx));
            idx += step;
            if (idx >= n4) idx -= n4;
        }
    }
    if (t < n - 4ull * n4)
        for (int r = 0; r < repeats; ++r) acc.x += __ldcg(src + 4ull * n4 + t);   // the n % 4 tail
    // block sum: warps, then the first warp over the warp sums
    __shared__ float warp_sums[READ_THREADS / 32];
    float s = warp_sum((acc.x + acc.y) + (acc.z + acc.w));
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < READ_THREADS / 32 ? warp_sums[threadIdx.x] : 0.f;
        s = warp_sum(s);
        if (threadIdx.x == 0) partial[blockIdx.x] = s;
    }
}
// [[/snippet]]

// [[snippet: smem_v1]]
// seed: [2 * SMEM_THREADS] float4, copied into every block's tile; out: [gridDim.x * SMEM_THREADS];
// clk: [2] = {SM cycles, ns} that thread 0 of block 0 spent in the loop.
// Warp w, lane l reads float4 number 32 w + l (and the same + SMEM_THREADS): each quarter-warp's
// eight 16-byte loads cover the 32 banks exactly once, so a warp's 512 bytes take 4 conflict-free passes.
extern "C" __global__ void __launch_bounds__(SMEM_THREADS, 2)
smem_read_v1_vec4(const float4* __restrict__ seed, int iters, float* __restrict__ out,
                  unsigned long long* __restrict__ clk)
{
    __shared__ float4 tile[2 * SMEM_THREADS];                           // [2 * SMEM_THREADS] float4 = 32 KB
    tile[threadIdx.x] = seed[threadIdx.x];
    tile[threadIdx.x + SMEM_THREADS] = seed[threadIdx.x + SMEM_THREADS];
    __syncthreads();
    const unsigned a0 = (unsigned)__cvta_generic_to_shared(&tile[threadIdx.x]);
    const unsigned a1 = a0 + SMEM_THREADS * (unsigned)sizeof(float4);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const long long c0 = clock64();
    const unsigned long long g0 = globaltimer_ns();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int u = 0; u < SMEM_UNROLL; ++u) add4(acc, lds128_volatile((u & 1) ? a1 : a0));
    }
    const long long c1 = clock64();
    const unsigned long long g1 = globaltimer_ns();
    out[blockIdx.x * SMEM_THREADS + threadIdx.x] = (acc.x + acc.y) + (acc.z + acc.w);
    if (blockIdx.x == 0 && threadIdx.x == 0) { clk[0] = (unsigned long long)(c1 - c0); clk[1] = g1 - g0; }
}
// [[/snippet]]

// [[snippet: fma_v1]]
// x, y: [FMA_CHAINS, n] floats (chain-major, so loads and stores are coalesced); thread t runs
// FMA_CHAINS independent chains a_k <- a_k * m + c, FMA_UNROLL * iters steps each.
// clk: [2] = {SM cycles, ns} that thread 0 spent in the loop.
extern "C" __global__ void __launch_bounds__(FMA_THREADS, 8)
fma_v1_chains(const float* __restrict__ x, float m, float c, int iters, int n, float* __restrict__ y,
              unsigned long long* __restrict__ clk)
{
    const int t = blockIdx.x * FMA_THREADS + threadIdx.x;
    if (t >= n) return;
    float a[FMA_CHAINS];                                                 // in registers
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; ++k) a[k] = x[(size_t)k * n + t];
    const long long c0 = clock64();
    const unsigned long long g0 = globaltimer_ns();
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int s = 0; s < FMA_UNROLL; ++s) {
#pragma unroll
            for (int k = 0; k < FMA_CHAINS; ++k) a[k] = fmaf(a[k], m, c);   // 8 independent FFMAs
        }
    }
    const long long c1 = clock64();
    const unsigned long long g1 = globaltimer_ns();
#pragma unroll
    for (int k = 0; k < FMA_CHAINS; ++k) y[(size_t)k * n + t] = a[k];
    if (t == 0) { clk[0] = (unsigned long long)(c1 - c0); clk[1] = g1 - g0; }
}
// [[/snippet]]
