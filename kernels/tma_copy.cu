// tma_copy.cu: chapter 17's TMA demo kernels (Hopper, sm_90). Not a ladder: two kernels that show
// what one cp.async.bulk.tensor does, used by the GPU test of utils/tma.py.
//
//   tma_copy_load_box_raw    every CTA TMA-loads one box of a 2-D tensor into shared memory, waits on
//                            an mbarrier, and writes the raw shared-memory bytes out linearly, so the
//                            host sees exactly where the swizzle put each element
//   tma_copy_roundtrip       every CTA TMA-loads one box and TMA-stores it to a second tensor at the
//                            same coordinates; boxes at the edge come back filled (load) and clipped
//                            (store) by the hardware, with no bounds checks in the kernel. The store
//                            clips whole 16-byte chunks of global memory: a row whose byte width is not
//                            a multiple of 16 gets its padding up to the next 16 bytes overwritten too
//                            (with the load's zero fill here; TiledSpec.store_spill_bytes in utils/tma.py)
//
// The tensor map (a 128-byte CUtensorMap built on the host by utils.tma) arrives by value as a
// const __grid_constant__ parameter: the kernel passes its address to TMA, which reads it from the
// parameter space. TMA coordinates count innermost first: {column, row}.

#include "tma_sm90.cuh"   // TmaDescriptor, smem_addr, mbarrier_*, fence_proxy_async_smem, tma_*

#define TMA_THREADS 128
#define SMEM_ALIGN 1024          // the 128-byte swizzle repeats every 1024 bytes: align the box to it
#define WAIT_TIMEOUT_NS 1000000000ull

// Status codes the host reads back (0 = fine).
#define TMA_STATUS_TIMEOUT 1     // the mbarrier never completed: the expected byte count was wrong

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Wait for the phase, but give up after a second and say so: a wrong byte count must fail the test,
// not hang the GPU.
__device__ __forceinline__ bool mbarrier_wait_or_flag(unsigned long long* bar, unsigned phase, int* status) {
    const unsigned long long start = global_timer_ns();
    while (!mbarrier_try_wait(bar, phase)) {
        if (global_timer_ns() - start > WAIT_TIMEOUT_NS) {
            atomicExch(status, TMA_STATUS_TIMEOUT);
            return false;
        }
    }
    return true;
}

// The dynamic shared-memory buffer, rounded up to SMEM_ALIGN (the launch asks for SMEM_ALIGN extra bytes).
__device__ __forceinline__ unsigned char* aligned_box_buffer(unsigned char* raw) {
    const unsigned offset = (SMEM_ALIGN - smem_addr(raw) % SMEM_ALIGN) % SMEM_ALIGN;
    return raw + offset;
}

// [[snippet: tma_load_box]]
// One CTA per box: blockIdx.x walks the columns of boxes, blockIdx.y the rows.
__device__ __forceinline__ bool load_one_box(const TmaDescriptor* map, unsigned char* box,
                                             unsigned long long* bar, int box_cols, int box_rows,
                                             unsigned box_bytes, int* status) {
    if (threadIdx.x == 0) {
        mbarrier_init(bar, 1);            // one arrival: the thread below that issues the copy
        fence_proxy_async_smem();         // the barrier's init is visible to TMA's complete_tx
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(bar, box_bytes);   // the whole box, out-of-bounds fill included
        tma_load_2d(box, map, blockIdx.x * box_cols, blockIdx.y * box_rows, bar);
    }
    return mbarrier_wait_or_flag(bar, 0, status);    // every thread waits for phase 0 to complete
}
// [[/snippet]]

extern "C" __global__ void __launch_bounds__(TMA_THREADS)
tma_copy_load_box_raw(const __grid_constant__ TmaDescriptor map, unsigned char* __restrict__ out,
                      int box_cols, int box_rows, unsigned box_bytes, unsigned smem_bytes,
                      int* __restrict__ status) {
    // out: [gridDim.y, gridDim.x, smem_bytes] uint8, the box's shared-memory image per CTA
    extern __shared__ unsigned char smem_raw[];
    __shared__ unsigned long long bar;
    unsigned char* box = aligned_box_buffer(smem_raw);   // [smem_bytes] uint8, 1024-aligned, swizzled box

    // Poison the buffer so bytes TMA does not write (row padding under a wide swizzle) are visible.
    for (unsigned i = threadIdx.x; i < smem_bytes; i += blockDim.x) box[i] = 0xA5;
    fence_proxy_async_smem();             // our poison stores come before TMA's writes
    if (!load_one_box(&map, box, &bar, box_cols, box_rows, box_bytes, status)) return;

    unsigned char* dst = out + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * smem_bytes;
    for (unsigned i = threadIdx.x; i < smem_bytes; i += blockDim.x) dst[i] = box[i];
}

// [[snippet: tma_roundtrip]]
extern "C" __global__ void __launch_bounds__(TMA_THREADS)
tma_copy_roundtrip(const __grid_constant__ TmaDescriptor src, const __grid_constant__ TmaDescriptor dst,
                   int box_cols, int box_rows, unsigned box_bytes, int* __restrict__ status) {
    extern __shared__ unsigned char smem_raw[];
    __shared__ unsigned long long bar;
    unsigned char* box = aligned_box_buffer(smem_raw);   // [box_rows, row pitch] bytes, swizzled as src says

    if (!load_one_box(&src, box, &bar, box_cols, box_rows, box_bytes, status)) return;
    if (threadIdx.x == 0) {
        fence_proxy_async_smem();         // shared memory as the load left it, seen by the store
        // Same coordinates, same box, same swizzle: TMA un-swizzles on the way out and clips the box to
        // dst's bounds in whole 16-byte chunks (rows past the edge are skipped; a row's tail up to its
        // next 16-byte boundary is written with what the box holds there).
        tma_store_2d(&dst, blockIdx.x * box_cols, blockIdx.y * box_rows, box);
        tma_store_commit_and_wait_read(); // the CTA's shared memory must outlive the store's reads
    }
}
// [[/snippet]]
