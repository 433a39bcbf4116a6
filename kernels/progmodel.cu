// progmodel.cu: chapter 3, the programming model by measurement.
//
// Experiments (not versions of an op):
//   whoami        every thread writes who it is: blockIdx, threadIdx, the linear block and thread
//                 numbers, the global id, warp and lane by formula, the hardware %laneid and %smid
//   wave_spin     every block waits a fixed wall time and stamps its SM and its start and end
//                 (%globaltimer): how a grid is dealt onto the SMs, wave by wave
//
// Block sum: each block writes one partial sum of a grid-stride share of x (float4 loads).
// Three ways to write the same block reduction, one version per idea:
//   block_sum_v0_shfl       raw __shfl_xor_sync butterflies per warp, warp sums through smem
//   block_sum_v1_cg         the same tree written with cooperative groups: thread_block,
//                           tiled_partition<32>, cg::reduce
//   block_sum_v2_cg_tile16  tiled_partition<16>: sixteen-thread tiles, twice as many partials in smem
//
// Filter (keep x[i] > threshold, order not kept), with a shared output counter:
//   filter_v0_atomic        one atomicAdd on the counter per kept element, as written
//   filter_v1_coalesced     cg::coalesced_threads(): the threads that took the branch together
//                           reserve their slots with one atomicAdd (warp-aggregated atomics)
//   filter_v2_block         block-aggregated: warp ballots, a scan of the 8 warp counts in smem,
//                           one atomicAdd per block per 256 elements
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

// PTX special registers: the multiprocessor this thread runs on, its lane, the global nanosecond timer.
__device__ __forceinline__ int sm_id() {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

__device__ __forceinline__ int lane_id() {
    int id;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));
    return id;
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// [[snippet: whoami]]
#define WHOAMI_FIELDS 16

extern "C" __global__ void whoami(int* __restrict__ out) {
    // out: [total threads, WHOAMI_FIELDS] int32, row = global id of the thread
    const int block_linear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int threads_per_block = blockDim.x * blockDim.y * blockDim.z;
    const int gid = block_linear * threads_per_block + tid;
    int* row = out + (long long)gid * WHOAMI_FIELDS;
    row[0] = blockIdx.x;  row[1] = blockIdx.y;  row[2] = blockIdx.z;
    row[3] = threadIdx.x; row[4] = threadIdx.y; row[5] = threadIdx.z;
    row[6] = block_linear;
    row[7] = tid;
    row[8] = gid;
    row[9] = tid / 32;               // warps are cut from the linear thread number, x fastest
    row[10] = tid % 32;
    row[11] = lane_id();             // what the hardware says the lane is
    row[12] = sm_id();               // which SM the block landed on: not predictable
    row[13] = blockIdx.x * blockDim.x + threadIdx.x;   // global (x, y, z) coordinates
    row[14] = blockIdx.y * blockDim.y + threadIdx.y;
    row[15] = blockIdx.z * blockDim.z + threadIdx.z;
}
// [[/snippet]]

// [[snippet: wave_spin]]
extern "C" __global__ void wave_spin(unsigned long long ns, int* __restrict__ smid,
                                     unsigned long long* __restrict__ t_start,
                                     unsigned long long* __restrict__ t_end) {
    // Every block lives `ns` nanoseconds of wall time (%globaltimer, not SM cycles: the SM clock
    // ramps up under load), whatever else runs on its SM. The dynamic shared memory the launch asks
    // for is never touched: it only caps how many blocks fit on one SM.
    const unsigned long long t0 = global_timer_ns();
    while (global_timer_ns() - t0 < ns) { }
    __syncthreads();
    if (threadIdx.x == 0) {
        smid[blockIdx.x] = sm_id();
        t_start[blockIdx.x] = t0;
        t_end[blockIdx.x] = global_timer_ns();
    }
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// Block sum. x holds n floats, 16-byte aligned; thread t of the grid adds float4 number t, t + T, ...
// (T = gridDim.x * blockDim.x); the n % 4 last floats go to the first threads of block 0.

#define SUM_THREADS 256

__device__ __forceinline__ float thread_share(const float* __restrict__ x, long long n) {
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
    const long long n4 = n >> 2;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.f;
    for (long long q = t; q < n4; q += stride) {
        const float4 v = x4[q];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    if (t < n - 4 * n4) acc += x[4 * n4 + t];     // scalar tail: at most 3 floats
    return acc;
}

// [[snippet: block_sum_v0]]
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
block_sum_v0_shfl(const float* __restrict__ x, long long n, float* __restrict__ partial) {
    __shared__ float warp_sums[SUM_THREADS / 32];         // [8] one per warp
    float v = thread_share(x, n);
    for (int offset = 16; offset > 0; offset >>= 1)       // butterfly: every lane ends with the sum
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < SUM_THREADS / 32 ? warp_sums[lane] : 0.f;
        for (int offset = 16; offset > 0; offset >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) partial[blockIdx.x] = v;
    }
}
// [[/snippet]]

// [[snippet: block_sum_v1]]
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
block_sum_v1_cg(const float* __restrict__ x, long long n, float* __restrict__ partial) {
    __shared__ float tile_sums[SUM_THREADS / 32];         // [8] one per 32-thread tile
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    float v = cg::reduce(tile, thread_share(x, n), cg::plus<float>());
    if (tile.thread_rank() == 0) tile_sums[tile.meta_group_rank()] = v;
    block.sync();
    if (tile.meta_group_rank() == 0) {
        v = tile.thread_rank() < tile.meta_group_size() ? tile_sums[tile.thread_rank()] : 0.f;
        v = cg::reduce(tile, v, cg::plus<float>());
        if (tile.thread_rank() == 0) partial[blockIdx.x] = v;
    }
}
// [[/snippet]]

// [[snippet: block_sum_v2]]
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
block_sum_v2_cg_tile16(const float* __restrict__ x, long long n, float* __restrict__ partial) {
    __shared__ float tile_sums[SUM_THREADS / 16];         // [16] one per 16-thread tile
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
    float v = cg::reduce(tile, thread_share(x, n), cg::plus<float>());
    if (tile.thread_rank() == 0) tile_sums[tile.meta_group_rank()] = v;
    block.sync();
    if (tile.meta_group_rank() == 0) {                    // 16 partials, 16 threads: one each
        v = cg::reduce(tile, tile_sums[tile.thread_rank()], cg::plus<float>());
        if (tile.thread_rank() == 0) partial[blockIdx.x] = v;
    }
}
// [[/snippet]]

// ---------------------------------------------------------------------------------------------------
// Filter: out[0 .. *count) receives every x[i] > threshold, in no particular order.

// [[snippet: filter_v0]]
extern "C" __global__ void filter_v0_atomic(const float* __restrict__ x, long long n, float threshold,
                                            float* __restrict__ out, unsigned int* __restrict__ count) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        if (v > threshold) out[atomicAdd(count, 1u)] = v;     // one atomic per kept element
    }
}
// [[/snippet]]

// [[snippet: filter_v1]]
extern "C" __global__ void filter_v1_coalesced(const float* __restrict__ x, long long n, float threshold,
                                               float* __restrict__ out, unsigned int* __restrict__ count) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        if (v > threshold) {
            cg::coalesced_group kept = cg::coalesced_threads();   // the lanes that took this branch
            unsigned int base = 0;
            if (kept.thread_rank() == 0) base = atomicAdd(count, kept.num_threads());
            base = kept.shfl(base, 0);                            // rank 0 tells the others
            out[base + kept.thread_rank()] = v;
        }
    }
}
// [[/snippet]]

// [[snippet: filter_v2]]
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
filter_v2_block(const float* __restrict__ x, long long n, float threshold, float* __restrict__ out,
                unsigned int* __restrict__ count) {
    __shared__ unsigned int warp_offset[SUM_THREADS / 32];   // [8] kept per warp, then their prefix
    __shared__ unsigned int block_base;
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    const long long stride = (long long)gridDim.x * blockDim.x;
    // The loop runs over block-sized windows, so every thread of a block takes the same number of
    // trips and the block.sync() calls inside are reached by all of them.
    for (long long start = (long long)blockIdx.x * blockDim.x; start < n; start += stride) {
        const long long i = start + threadIdx.x;
        const float v = i < n ? x[i] : 0.f;
        const bool keep = i < n && v > threshold;
        const unsigned int mask = warp.ballot(keep);             // bit l: lane l keeps its element
        if (warp.thread_rank() == 0) warp_offset[warp.meta_group_rank()] = __popc(mask);
        block.sync();
        if (block.thread_rank() == 0) {                          // exclusive scan of 8 counts
            unsigned int total = 0;
            for (int w = 0; w < SUM_THREADS / 32; ++w) {
                const unsigned int c = warp_offset[w];
                warp_offset[w] = total;
                total += c;
            }
            block_base = total ? atomicAdd(count, total) : 0u;   // one atomic per block window
        }
        block.sync();
        if (keep) {
            const unsigned int below = __popc(mask & ((1u << warp.thread_rank()) - 1u));
            out[block_base + warp_offset[warp.meta_group_rank()] + below] = v;
        }
        block.sync();                                            // offsets are rewritten next trip
    }
}
// [[/snippet]]
