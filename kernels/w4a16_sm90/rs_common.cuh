// rs_common.cuh: what the W4A16 wgmma GEMM (chapter 13, op w4a16_wgmma) builds on: the stage ring's layout, the
// stream-K partition of (tile, group) units, the producer's TMA loads, the weights' path from shared memory to
// wgmma's A registers, and the flush of a tile's accumulators. The kernel itself is v01_rs.cu.
//
// y^T [N, M] = W^T [N, K] x^T [K, M]: the weights are wgmma's A (64 rows of N per warpgroup and slice, from
// registers), the activations x [M, K] its B (TOK tokens, K-major: x's own rows) from shared memory.
// Weights qw [ceil(N/64), K/64, 128, 4] int32 (kernels/w4a16_sm90 pack_wgmma): for each n64 slice and k64 chunk a
// 2 KB record in which thread tid = 32 w + lane of a warpgroup owns 16 bytes, one word per k16 step, and each word
// is chapter 9's pack_mma word of the n16 tile 4 slice + w (mma_frags.cuh): the nibbles of rows g and g + 8 at
// k 2t, 2t + 1, 2t + 8, 2t + 9, exactly the bf16 values wgmma's A fragment puts in this thread.
// Scales [K/128, N] bf16 and GPTQ qzeros [K/128, N/8] int32 as chapter 9 reads them.
#pragma once
#include "hopper_common.cuh"   // (kernels/hgemm) gmma_desc_sw128, SW128_ATOM, atom_aligned; TMA, mbarriers, wgmma groups
#include "mma_frags.cuh"       // (kernels/quant) dequant_b_frags, GROUP: chapter 9's magic-number dequantisation
#include "wgmma_rs_sm90.cuh"

namespace w4a16_sm90 {

constexpr int KC = 64;                 // k per weight record and per TMA box of x (128 bytes of bf16)
constexpr int RECORD = 128 * 16;       // bytes of one (n64 slice, k64 chunk) weight record
constexpr int STEPS = GROUP / 16;      // k16 steps per stage: a stage is one quantisation group
// wgmma groups a warpgroup keeps in flight, each of SL wgmmas (one per slice): the A registers of ring(SL) k16
// steps stay live, 4 wgmmas' worth either way (two slices at 64 tokens spill with a ring of 4)
__host__ __device__ constexpr int ring(int slices) { return slices == 1 ? 4 : 2; }

__host__ __device__ constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Accumulator chains per slice: k16 step j adds into chain j % CHAINS. A wgmma that adds into the accumulators
// the previous one wrote waits for it: one chain of m64n16k16 runs at ~59 cycles per wgmma on the H200, two
// alternating chains at ~19 (scratch measurement, chapter 13); the chains are added once per tile segment.
constexpr int CHAINS = 2;

template <int TOK, int SL>
__device__ __forceinline__ void add_chains(const float (&acc)[SL][CHAINS][TOK / 2], float (&sum)[SL][TOK / 2]) {
#pragma unroll
    for (int sl = 0; sl < SL; ++sl)
#pragma unroll
        for (int e = 0; e < TOK / 2; ++e) {
            float v = acc[sl][0][e];
#pragma unroll
            for (int c = 1; c < CHAINS; ++c) v += acc[sl][c][e];
            sum[sl][e] = v;
        }
}

// One stage of the ring, 1024-byte aligned (the 128-byte swizzle's period), NS n64 slices of one group:
//   x  [2 boxes][TOK tokens][64 k] bf16, 128-byte swizzled   (TMA box of x: TOK x 64)
//   W  [NS slices][2 k64 records][128 threads][16 B]          (TMA box of qw: 2 records)
//   S  [64 NS] bf16 scales of the CTA's columns, Z [8 NS] qzeros words   (TMA boxes of one row)
template <int TOK, int NS>
struct Stage {
    static constexpr int BN = 64 * NS;                      // columns of y (rows of D) per CTA
    static constexpr int X_BOX = TOK * 128;
    static constexpr int W_OFF = 2 * X_BOX, W_SLICE = 2 * RECORD;
    static constexpr int S_OFF = W_OFF + NS * W_SLICE;
    static constexpr int Z_OFF = S_OFF + round_up(2 * BN, 128);
    static constexpr int BYTES = round_up(Z_OFF + round_up(BN / 2, 128), SW128_ATOM);
    static constexpr unsigned TX = 2 * X_BOX + NS * W_SLICE + 2 * BN + BN / 2;   // bytes TMA lands per stage
    static_assert(X_BOX % SW128_ATOM == 0, "each swizzled box of x starts 1024-byte aligned");
};

// Stream-K over U = tiles x G units (tile-major: the groups of tile 0, then of tile 1, ...): CTA c of P takes units
// [c U / P, (c + 1) U / P), so every CTA streams the same number of groups (+-1) whatever N / BN is, and the ring
// runs straight across the tiles it crosses (chapter 9's w4a16_gemm_v3_stripe partitions the same way).
struct Stripe {
    int G, P;
    long long U, u0;
    int count;
    __device__ __forceinline__ Stripe(int tiles, int groups)
        : G(groups), P(gridDim.x), U((long long)tiles * groups), u0((long long)blockIdx.x * U / P),
          count((int)((long long)(blockIdx.x + 1) * U / P - u0)) {}
    // the CTA whose range holds unit u
    __device__ __forceinline__ int owner(long long u) const { return (int)(((u + 1) * P - 1) / U); }
};

// Diagnostics for chapter 13's next step (off unless W4A16_TIMELINE is defined): per CTA, the globaltimer at the
// kernel's start, when its first stage is full, and when its consumers are done, in w4a16_timeline[3 block + i].
#ifdef W4A16_TIMELINE
extern "C" __device__ unsigned long long w4a16_timeline[3 * 1024];   // 1024 CTAs at most (kernels/w4a16_sm90 cta_timeline)
#define W4A16_STAMP(i)                                                                               \
    do {                                                                                            \
        if (threadIdx.x == 0) {                                                                     \
            unsigned long long t_;                                                                  \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                  \
            w4a16_timeline[3 * blockIdx.x + (i)] = t_;                                              \
        }                                                                                           \
    } while (0)
#else
#define W4A16_STAMP(i) do {} while (0)
#endif

// The producer (one thread): unit after unit, wait until the consumers freed the slot, announce the stage's bytes,
// issue its TMA loads. What lies outside x (tokens >= M), qw (slices >= ceil(N / 64)), scales and qzeros (columns
// >= N) arrives as zeros and still counts its bytes.
template <int TOK, int NS, int STAGES>
__device__ __forceinline__ void produce(unsigned char* smem, unsigned long long* full, unsigned long long* empty,
                                        const Stripe& sp, const TmaDescriptor* map_x, const TmaDescriptor* map_w,
                                        const TmaDescriptor* map_s, const TmaDescriptor* map_z, int K) {
    using S = Stage<TOK, NS>;
    int T = (int)(sp.u0 / sp.G), g = (int)(sp.u0 % sp.G);
    for (int i = 0; i < sp.count; ++i) {
        const int s = i % STAGES;
        mbarrier_wait(&empty[s], ((i / STAGES) & 1) ^ 1);   // a fresh barrier passes parity 1: round 0 is free
        unsigned char* st = smem + s * S::BYTES;
        mbarrier_arrive_expect_tx(&full[s], S::TX);
        tma_load_2d(st, map_x, g * GROUP, 0, &full[s]);
        tma_load_2d(st + S::X_BOX, map_x, g * GROUP + KC, 0, &full[s]);
#pragma unroll
        for (int sl = 0; sl < NS; ++sl)                     // records 2g, 2g + 1 of slice T NS + sl
            tma_load_2d(st + S::W_OFF + sl * S::W_SLICE, map_w, 0, (T * NS + sl) * (K / KC) + 2 * g, &full[s]);
        tma_load_2d(st + S::S_OFF, map_s, T * S::BN, g, &full[s]);
        tma_load_2d(st + S::Z_OFF, map_z, T * S::BN / 8, g, &full[s]);
        if (++g == sp.G) {
            g = 0;
            ++T;
        }
    }
}

// This thread's (s, s) and (128 + z, 128 + z) for its rows g and g + 8 of the CTA's slice `slice` (n = 64 slice
// + 16 w + g: qzeros words n / 8 and n / 8 + 1, nibble g), as marlin_stage_mma reads them for its columns.
template <int TOK, int NS>
__device__ __forceinline__ void slice_side(const unsigned char* st, int slice, __nv_bfloat162 (&zb)[2],
                                           __nv_bfloat162 (&sb)[2]) {
    using S = Stage<TOK, NS>;
    const int tid = threadIdx.x % 128, n = 64 * slice + 16 * (tid / 32) + (tid % 32) / 4;
    const __nv_bfloat16* ss = reinterpret_cast<const __nv_bfloat16*>(st + S::S_OFF);
    const unsigned* sz = reinterpret_cast<const unsigned*>(st + S::Z_OFF);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        sb[h] = __bfloat162bfloat162(ss[n + 8 * h]);
        zb[h] = u32_as_bf162(bf16x2_biased_zero((sz[n / 8 + h] >> (4 * (n % 8))) & 0xfu));
    }
}

// [[snippet: w4a16_rs_fragment]]
// One prepacked word (a k16 step of this thread) -> its A fragment. dequant_b_frags (chapter 9: lop3 makes 128 + q,
// hsub2 with 128 + z leaves q - z, hmul2 by s rounds once) returns the pairs in mma.sync's B order: b[0], b[1] =
// row g at k (2t, 2t+1) and (2t+8, 2t+9), b[2], b[3] = the same of row g + 8. wgmma's A takes the rows first:
// a0 = row g low k, a1 = row g + 8 low k, a2 = row g high k, a3 = row g + 8 high k.
__device__ __forceinline__ void a_fragment(unsigned word, const __nv_bfloat162 (&zb)[2], const __nv_bfloat162 (&sb)[2],
                                           unsigned (&a)[4]) {
    unsigned b[4];
    dequant_b_frags(word, zb, sb, b);
    a[0] = b[0];
    a[1] = b[2];
    a[2] = b[1];
    a[3] = b[3];
}
// [[/snippet]]

// x's k16 step j (0..7) of a stage: box j / 4, 32 bytes per step into each 128-byte row; K-major, 128-byte
// swizzle: 8-token atoms SBO = 1024 bytes apart, LBO unused (CUTLASS v4.7.0 make_gmma_desc<Major::K>, B128:
// ((8, n), 2) : ((8, SBO), 1) in 16-byte units, include/cute/atom/mma_traits_sm90_gmma.hpp).
template <int TOK>
__device__ __forceinline__ unsigned long long x_desc(const unsigned char* st, int j) {
    return gmma_desc_sw128(st + (j / 4) * (TOK * 128) + 32 * (j % 4), 16, SW128_ATOM);
}

// Visit this thread's accumulator pairs of its warpgroup: f(v0, v1, n, tok) with n the column of y within the
// CTA's tile (a row of D: 64 slice + 16 w + g + 8 h) and tok, tok + 1 the tokens (columns 8 j + 2 t of D).
template <int TOK, int SL, typename F>
__device__ __forceinline__ void for_each_pair(const float (&acc)[SL][TOK / 2], F&& f) {
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128, lane = tid % 32;
#pragma unroll
    for (int sl = 0; sl < SL; ++sl)
#pragma unroll
        for (int j = 0; j < TOK / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                f(acc[sl][4 * j + 2 * h], acc[sl][4 * j + 2 * h + 1],
                  64 * (wg * SL + sl) + 16 * (tid / 32) + lane / 4 + 8 * h, 8 * j + 2 * (lane % 4));
}

// Whether this warpgroup is the last of `contributors` to bring its partial of a tile (its `counter` counts
// them); the last one also sets the counter back to zero for the next launch. Partials are then read with __ldcg.
// A warpgroup's own barrier, not __syncthreads: the producer warp runs on ahead and never comes to it.
__device__ __forceinline__ bool last_contributor(unsigned* counter, int contributors, int* flag) {
    __threadfence();                                        // this thread's partials are in L2 before the count
    warpgroup_sync();
    if (threadIdx.x % 128 == 0) {
        *flag = atomicAdd(counter, 1u) == unsigned(contributors - 1);
        if (*flag) *counter = 0u;
    }
    warpgroup_sync();
    return *flag;
}

}  // namespace w4a16_sm90
