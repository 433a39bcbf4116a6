// memory.cu: microbenchmarks of the memory hierarchy (chapter 4). Each kernel isolates one effect:
//
//   memory_pointer_chase       one thread follows a random cycle of dependent loads: latency per load
//                              at each level (L1, L2, HBM), depending on the working-set size
//   memory_strided_copy        y[t] = x[t * stride]: what uncoalesced reads cost (32-byte sectors)
//   copy_width_v0_float        y = x, one 4-byte float per thread
//   copy_width_v1_float2       ... one 8-byte float2 per thread (half the threads and instructions)
//   copy_width_v2_float4       ... one 16-byte float4 per thread (a quarter)
//   memory_smem_row            a warp reads a row of a 32x32 fp32 tile in shared memory (reference)
//   memory_smem_col            ... reads a column of the unpadded tile: a 32-way bank conflict
//   memory_smem_col_padded     ... of a [32][33] tile: no conflict
//   memory_smem_col_swizzled   ... of an unpadded tile stored with column ^ row: no conflict
//   memory_smem_row_vec4       rows again, 16 bytes per lane per load: 4 passes move 512 bytes
#include "common.cuh"

// [[snippet: pointer_chase]]
// One thread, one dependent chain: the address of load i+1 is the value of load i, so no two loads
// overlap and the kernel's time divided by `hops` is the latency of one load. `next` holds a random
// cyclic permutation of nodes spaced 128 bytes apart (one node per cache line).
extern "C" __global__ void memory_pointer_chase(const unsigned* next, unsigned start,
                                                unsigned long long hops, unsigned* sink) {
    unsigned j = start;
    for (unsigned long long i = 0; i < hops; ++i) j = next[j];
    sink[0] = j;  // the node where the walk ended: keeps the chain alive and lets the host check it
}
// [[/snippet]]

// [[snippet: strided_copy]]
// Element t of y comes from x[t * stride]. Writes are always coalesced; the reads of a warp touch one
// 32-byte sector per 8 / stride threads (stride < 8) or one sector per thread (stride >= 8).
// Each thread moves STRIDED_ITEMS elements, t = block * 2048 + threadIdx.x + 256 k, with all its loads
// issued before its stores: 32 bytes in flight per thread, so that stride 1 runs at copy speed
// instead of being limited by latency (section 4.4).
#define STRIDED_ITEMS 8
extern "C" __global__ void memory_strided_copy(const float* __restrict__ x, float* __restrict__ y,
                                               unsigned n, unsigned stride) {
    const unsigned base = blockIdx.x * (256u * STRIDED_ITEMS) + threadIdx.x;  // blockDim.x == 256
    float v[STRIDED_ITEMS];
#pragma unroll
    for (int k = 0; k < STRIDED_ITEMS; ++k) {
        const unsigned t = base + 256u * k;
        v[k] = t < n ? x[(size_t)t * stride] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < STRIDED_ITEMS; ++k) {
        const unsigned t = base + 256u * k;
        if (t < n) y[t] = v[k];
    }
}
// [[/snippet]]

// [[snippet: copy_vec]]
// The same copy with 4-, 8- or 16-byte elements: one element of type T per thread, so the float4
// version has a quarter of the threads, instructions and requests of the float one.
template <typename T>
__device__ __forceinline__ void copy_one(const T* __restrict__ x, T* __restrict__ y, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

extern "C" __global__ void copy_width_v0_float(const float* __restrict__ x, float* __restrict__ y,
                                          unsigned long long n) { copy_one(x, y, n); }
extern "C" __global__ void copy_width_v1_float2(const float2* __restrict__ x, float2* __restrict__ y,
                                          unsigned long long n) { copy_one(x, y, n); }
extern "C" __global__ void copy_width_v2_float4(const float4* __restrict__ x, float4* __restrict__ y,
                                          unsigned long long n) { copy_one(x, y, n); }
// [[/snippet]]

// [[snippet: smem_banks]]
// Shared memory has 32 banks of 4 bytes: word address a lives in bank a % 32. A warp's load is
// served in one pass when its 32 lanes hit 32 different banks (or the same word); k lanes on
// different words of one bank take k passes (a k-way conflict).
//
// Each block copies a 32x32 tile of x into shared memory, then every warp reads it `reps` times,
// 32 loads per lane per rep; lane l sums what it read. MODE picks the access and the layout:
//   0: row      lane l reads element (c, l)  at word c * LD + l        banks l          (no conflict)
//   1: column   lane l reads element (l, c)  at word l * LD + c        LD = 32: bank c  (32-way)
//                                                                      LD = 33: bank (l + c) % 32
//   2: swizzled element (r, c) is stored at word r * 32 + (c ^ r);     bank c ^ l       (no conflict)
//   3: row, 16 bytes per lane: instruction q reads rows 4q..4q+3, lane l the float4 at row 4q + l / 8,
//      columns 4 (l % 8) .. +3. 512 bytes per instruction, served in 4 conflict-free passes of 8 lanes.
template <int LD, int MODE>
__device__ __forceinline__ int smem_word(int lane, int c) {
    if (MODE == 0) return c * LD + lane;
    if (MODE == 1) return lane * LD + c;
    return lane * LD + (c ^ lane);
}

// A 16-byte shared-memory load that is always issued (ld.volatile), like the volatile scalar loads.
__device__ __forceinline__ float4 lds128(const float* p) {
    float4 v;
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
    return v;
}

template <int LD, int MODE>
__device__ __forceinline__ void smem_read(const float* __restrict__ x, float* __restrict__ y, int reps) {
    __shared__ __align__(16) float tile[32 * LD];  // [32, LD] floats: the block's 32x32 tile (+ padding if LD = 33)
    const float* src = x + (size_t)blockIdx.x * 1024;
    for (int e = threadIdx.x; e < 1024; e += blockDim.x) {
        const int r = e / 32, c = e % 32;
        tile[r * LD + (MODE == 2 ? (c ^ r) : c)] = src[e];  // MODE 3 uses the plain layout
    }
    __syncthreads();
    volatile float* t = tile;  // volatile: every load is issued, none merged or hoisted
    const int lane = threadIdx.x % 32;
    float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
    for (int k = 0; k < reps; ++k) {
        if (MODE == 3) {
#pragma unroll
            for (int q = 0; q < 8; ++q) {  // 8 loads of 16 bytes: as many bytes as 32 loads of 4
                const float4 v = lds128(tile + (4 * q + lane / 8) * 32 + 4 * (lane % 8));
                acc0 += v.x; acc1 += v.y; acc2 += v.z; acc3 += v.w;
            }
        } else {
#pragma unroll
            for (int c = 0; c < 32; c += 4) {
                acc0 += t[smem_word<LD, MODE>(lane, c + 0)];
                acc1 += t[smem_word<LD, MODE>(lane, c + 1)];
                acc2 += t[smem_word<LD, MODE>(lane, c + 2)];
                acc3 += t[smem_word<LD, MODE>(lane, c + 3)];
            }
        }
    }
    y[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = (acc0 + acc1) + (acc2 + acc3);
}

extern "C" __global__ void memory_smem_row(const float* x, float* y, int reps) { smem_read<32, 0>(x, y, reps); }
extern "C" __global__ void memory_smem_col(const float* x, float* y, int reps) { smem_read<32, 1>(x, y, reps); }
extern "C" __global__ void memory_smem_col_padded(const float* x, float* y, int reps) { smem_read<33, 1>(x, y, reps); }
extern "C" __global__ void memory_smem_col_swizzled(const float* x, float* y, int reps) { smem_read<32, 2>(x, y, reps); }
extern "C" __global__ void memory_smem_row_vec4(const float* x, float* y, int reps) { smem_read<32, 3>(x, y, reps); }
// [[/snippet]]
