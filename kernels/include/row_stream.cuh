// row_stream.cuh: raw 16-byte chunks and the double-buffered row-slice stream shared by the softmax
// (chapter 6) and LayerNorm / RMSNorm (chapter 7) kernels.
//
// Part 1, raw chunks: a 16-byte chunk kept as the bits that came from memory (uint4: 4 fp32 or 8 bf16)
// and widened to floats where a pass needs them. Three widenings of a bf16 chunk, each kept because
// ptxas allocates registers differently around them (chapters 6 and 7 measured each choice):
//   unpack       shift / mask (a bf16 is the top half of an fp32)
//   unpack_prmt  the same through PRMT: a second spelling, so that the compiler does not keep one
//                pass's widened floats alive for the next pass (common subexpressions)
//   unpack_raw   PRMT as `asm volatile`: never merged with another unpack of the same chunk
// and pack_raw, the inverse (fp32 as is, bf16 rounded to nearest even).
//
// Part 2, the row-slice stream of the persistent cluster kernels (softmax_v9_stream, layernorm_v7_stream,
// rmsnorm_v5_stream): a CTA owns the same slice of every row it touches; its threads copy the slice of
// the NEXT row into one shared-memory buffer with cp.async while they reduce and write the current row
// from the other buffer. Thread t copies exactly the chunks t, t + THREADS, ... it later reads, so its
// own cp.async.wait_group is all the synchronization the data needs.
//
// Part 3, the split exit barrier of the one-cluster-per-row kernels (softmax_v11_early_arrive,
// layernorm_v8_early_arrive, rmsnorm_v6_early_arrive): cluster_arrive_relaxed / cluster_wait.
#pragma once

#include <cuda_bf16.h>

// [[snippet: raw_unpack]]
__device__ __forceinline__ void unpack(const uint4& q, float (&v)[4]) {
    v[0] = __uint_as_float(q.x); v[1] = __uint_as_float(q.y);
    v[2] = __uint_as_float(q.z); v[3] = __uint_as_float(q.w);
}
__device__ __forceinline__ void unpack(const uint4& q, float (&v)[8]) {
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {                       // a bf16 is the top half of an fp32: one shift/mask
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}

// KEEP: asm volatile, so that no two unpacks of the same chunk are merged.
template <bool KEEP>
__device__ __forceinline__ void unpack_permute(const uint4& q, float (&v)[8]) {
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        unsigned lo, hi;
        if constexpr (KEEP) {
            asm volatile("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(w[k]));   // bytes {0, 0, b0, b1}
            asm volatile("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(hi) : "r"(w[k]));   // bytes {0, 0, b2, b3}
        } else {
            asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(w[k]));
            asm("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(hi) : "r"(w[k]));
        }
        v[2 * k] = __uint_as_float(lo);
        v[2 * k + 1] = __uint_as_float(hi);
    }
}
__device__ __forceinline__ void unpack_prmt(const uint4& q, float (&v)[4]) { unpack(q, v); }
__device__ __forceinline__ void unpack_prmt(const uint4& q, float (&v)[8]) { unpack_permute<false>(q, v); }
__device__ __forceinline__ void unpack_raw(const uint4& q, float (&v)[4]) { unpack(q, v); }
__device__ __forceinline__ void unpack_raw(const uint4& q, float (&v)[8]) { unpack_permute<true>(q, v); }

__device__ __forceinline__ uint4 pack_raw(const float (&v)[4]) {
    return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
}
__device__ __forceinline__ uint4 pack_raw(const float (&v)[8]) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *reinterpret_cast<const unsigned*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}
// [[/snippet]]

// Raw bits of one element, and the 16-byte chunk of VEC elements built element by element (the rows
// that are not 16-byte aligned, and the chunk past a row's end): element e0 + k for e0 + k < cols,
// PAD's bits (per element) beyond.
__device__ __forceinline__ unsigned elem_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned elem_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

template <typename T>
__device__ __forceinline__ uint4 gather_chunk(const T* __restrict__ row, int e0, int cols, unsigned pad) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int BITS = 8 * (int)sizeof(T);
    unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const unsigned b = e0 + k < cols ? elem_bits(row[e0 + k]) : pad;
        w[k * BITS / 32] |= b << ((k * BITS) % 32);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// The inverse for the write: a full chunk as one streaming 16-byte store (st.global.cs: y is not read
// again, so it should not displace x from L2), a partial one element by element.
__device__ __forceinline__ void store_elem(float* p, unsigned bits) { *p = __uint_as_float(bits); }
__device__ __forceinline__ void store_elem(__nv_bfloat16* p, unsigned bits) {
    *p = __ushort_as_bfloat16((unsigned short)bits);
}

template <typename T>
__device__ __forceinline__ void scatter_chunk(T* __restrict__ row, int e0, int cols, bool vec_ok, uint4 q) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int BITS = 8 * (int)sizeof(T);
    if (vec_ok && e0 < cols) {
        __stcs(reinterpret_cast<uint4*>(row + e0), q);
    } else {
        const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (e0 + k < cols)
                store_elem(row + e0 + k, (w[k * BITS / 32] >> ((k * BITS) % 32)) & (BITS == 32 ? 0xffffffffu : 0xffffu));
    }
}

// [[snippet: row_stream]]
// Ampere's asynchronous copy, global -> shared, 16 bytes, cached in L2 only (.cg): the data goes
// straight into shared memory without passing through registers, and the issuing thread is free at
// once. commit_group closes a group of copies; wait_group N returns when at most N of this thread's
// groups are still in flight. The "memory" clobbers keep the compiler from moving shared-memory
// reads of the buffer being refilled past the copy.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// One CTA's slice of a row, NC chunks per thread: thread t owns local chunks t + j * THREADS (j < NC),
// i.e. global chunks first + t + j * THREADS, so a warp's copy instruction covers 512 contiguous bytes.
// `buf` is this CTA's [NC * THREADS] chunk buffer in shared memory.
template <typename T, int NC, int THREADS>
struct RowSlice16 {
    static constexpr int VEC = 16 / sizeof(T);
    static constexpr int CHUNKS = NC * THREADS;          // chunks per CTA per row
    static constexpr int BYTES = 16 * CHUNKS;            // shared memory per buffer

    // Issue the copies of this thread's chunks of `row` into `buf` and close them as one group. Chunks
    // with no 16-byte source (a row that is not a multiple of VEC, or past its end) are gathered element
    // by element and stored to shared memory directly (pad bits beyond the row): the same thread reads
    // them later, so program order is all they need. Always commits (an empty group when skip), so
    // that every iteration of the caller's loop has exactly one group to wait for.
    static __device__ __forceinline__ void issue(uint4* __restrict__ buf, const T* __restrict__ row, int first,
                                                 int cols, bool vec_ok, unsigned pad, bool skip) {
        if (!skip) {
#pragma unroll
            for (int j = 0; j < NC; ++j) {
                const int i = threadIdx.x + j * THREADS;
                const int e0 = (first + i) * VEC;
                if (vec_ok && e0 < cols) cp_async16(&buf[i], row + e0);
                else buf[i] = gather_chunk(row, e0, cols, pad);
            }
        }
        cp_async_commit();
    }

    // This thread's chunk j of the buffer (after wait: the thread's own copies have landed).
    static __device__ __forceinline__ uint4 get(const uint4* __restrict__ buf, int j) {
        return buf[threadIdx.x + j * THREADS];
    }
    // Global column of this thread's chunk j.
    static __device__ __forceinline__ int col(int first, int j) { return (first + threadIdx.x + j * THREADS) * VEC; }
};

// CTAs per SM a stream kernel is built for (__launch_bounds__' second argument): as many as the
// double buffers leave room for in the 228 KiB of an SM (2 KiB per CTA for static slots and the
// driver's reservation), at most 2048 threads. ptxas then caps the registers so that they do not
// become the limit instead: 64 KiB buffers -> 3 CTAs of 256 threads, 128 KiB -> 1 CTA. HELD: registers
// a thread keeps across rows (the norms' w and b chunks, 4 per chunk each); when non-zero the count is
// also bounded by the register file over an estimate of HELD + 4 per chunk + 40, so that a tight cap
// does not make ptxas spill the weights.
template <int NC, int THREADS, int HELD = 0>
__host__ __device__ constexpr int stream_min_blocks() {
    constexpr int by_smem = (228 * 1024) / (2 * 16 * NC * THREADS + 2048);
    constexpr int by_threads = 2048 / THREADS;
    constexpr int by_regs = HELD > 0 ? 65536 / (THREADS * (HELD + 4 * NC + 40)) : by_threads;
    constexpr int m = by_smem < by_threads ? by_smem : by_threads;
    constexpr int m2 = m < by_regs ? m : by_regs;
    return m2 < 1 ? 1 : m2;
}
// [[/snippet]]

// [[snippet: cluster_split_barrier]]
// The last cluster barrier of a one-cluster-per-row kernel only keeps each CTA's shared memory alive
// until its peers have read it over DSMEM. cg::this_cluster().sync() is barrier.cluster.arrive (release)
// + barrier.cluster.wait (acquire), and the release is a GPU-scope fence before the arrive
// (MEMBAR.ALL.GPU + ERRBAR in SASS): placed after the stores, every thread waits there until all its
// global stores are acknowledged, and its CTA holds its SM slot until then. Split instead: each thread
// arrives, relaxed (UCGABAR_ARV alone: no fence, no wait), once its last DSMEM read has returned; then
// stores; then waits just before it exits, for arrivals that happened long ago. PTX rules (sm_90):
// .aligned means every thread of the warp executes the same instruction (no divergent code around
// these); every thread of every CTA of the cluster arrives exactly once per phase, and waits only after
// arriving. A cluster of one CTA needs neither: the callers compile them away for CLUSTER == 1.
// "Returned" must hold in the machine code: ptxas keeps memory instructions in order around the arrive
// but not the ALU work between them, so after a plain DSMEM load and its warp_sum it issues UCGABAR_ARV
// right behind the LD, before the data is back (seen in the SASS): a peer could then pass its wait and
// exit while it is still being read. So either the value reaches a shared-memory store and a
// __syncthreads before the arrive (softmax_v11), or the read is ld_acquire_cluster (the norms): an
// acquire load is followed by a CCTL.IVALL that waits for its data, and the arrive issues after that.
__device__ __forceinline__ float ld_acquire_cluster(const float* p) {
    float v;
    asm volatile("ld.acquire.cluster.f32 %0, [%1];\n" : "=f"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
// [[/snippet]]
