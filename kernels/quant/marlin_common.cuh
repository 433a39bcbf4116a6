// marlin_common.cuh: the Marlin-style GEMM's stage layout, per-thread copies and the stage of mma
// that GEMM v2 introduces and v3 reuses unchanged.
#pragma once
#include "mma_frags.cuh"
#include "splitk.cuh"

// ---------------------------------------------------------------------------------------------------
// W4A16 tensor-core GEMM v2, Marlin's structure: C [M, N] = A [M, K] @ dequant(W), M <= 64.
// Weights: the same offline shuffle as w4a16_mma (qmma [N/16, K/64, 32, 4]: a lane's 16 bytes are its
// B fragments for 4 k16 steps); GPTQ qzeros; bf16 scales.
// CTA: 8 warps, BN = 128 NTW columns (warp w owns n16 tiles w NTW .. w NTW + NTW - 1), all M rows
// (MT m16 tiles, zero rows past M), the groups [g_begin, g_end) of its K split.
// Stage = one group (k128), streamed by cp.async, STAGES deep:
//   W [NT_CTA n16 tiles][2 k64][32 lanes] uint4 | A [16 MT rows][128] bf16, 16-byte chunks XOR-swizzled
//   by row % 8 so that ldmatrix is conflict-free | scales [BN] bf16 | qzeros [BN/8] int32
// Inner loop per k16 step: ldmatrix.x4 the A fragment of each m16 tile; dequantize each owned n16
// tile's word into B fragments (dequant_b_frags); 2 mma per (m16 tile, n16 tile). fp32 accumulators
// stay in registers across the whole K range; split-K partials meet as in the GEMV.
// Requires K % 128 == 0, N % 16 == 0, 1 <= M <= 16 MT.
// ---------------------------------------------------------------------------------------------------
template <int MT, int NTW>
struct MarlinStage {
    static constexpr int NT_CTA = 8 * NTW;                       // n16 tiles per CTA
    static constexpr int BN = 16 * NT_CTA;
    static constexpr int W_BYTES = NT_CTA * 1024;                // [NT_CTA][2][32] uint4
    static constexpr int A_BYTES = 16 * MT * GROUP * 2;          // [16 MT][128] bf16
    static constexpr int S_BYTES = BN * 2;
    static constexpr int Z_BYTES = BN / 2;
    static constexpr int BYTES = W_BYTES + A_BYTES + S_BYTES + Z_BYTES;
};

// One thread's share of every stage, worked out once: which 16-byte pieces of W and A (and which scale
// chunk or zero word) it copies, and where they land. A stage of group g then costs each thread
// 2 NTW + MT + 1 cp.async at fixed offsets plus g times a stride. Run 1's version recomputed tile,
// row, chunk, swizzle and bounds for every copy of every stage inside generic loops: ~600 SASS
// instructions per warp per stage against ~40 for the 16 mma, which made the kernel issue-bound.
// [[snippet: marlin_copies]]
template <int MT, int NTW>
struct MarlinCopies {
    using S = MarlinStage<MT, NTW>;
    static constexpr int NW = S::NT_CTA * 64 / 256;             // W uint4 per thread: 2 NTW
    static constexpr int NA = 16 * MT * 16 / 256;                // A 16-byte chunks per thread: MT
    int w_src[NW];                                               // uint4 index into qmma at group 0
    bool w_ok[NW];
    int a_src[NA], a_dst[NA];                                    // element index into A at group 0, smem byte
    bool a_ok[NA];
    int side_src, side_dst;                                      // scales element / qzeros word at group 0
    int side_kind;                                               // 0 none, 1 eight scales, 2 one zero word

    __device__ __forceinline__ MarlinCopies(int nt0, int M, int K, int N) {
        const int ntiles = N / 16, kchunks = K / 64;
#pragma unroll
        for (int j = 0; j < NW; ++j) {                           // 1 KB contiguous per n16 tile and group
            const int i = threadIdx.x + 256 * j, tile = nt0 + i / 64;
            w_ok[j] = tile < ntiles;
            w_src[j] = (w_ok[j] ? tile : 0) * kchunks * 32 + i % 64;
        }
#pragma unroll
        for (int j = 0; j < NA; ++j) {                           // row r, 16-byte chunk c (8 k), XOR-swizzled
            const int i = threadIdx.x + 256 * j, r = i / 16, c = i % 16;
            a_ok[j] = r < M;
            a_src[j] = (a_ok[j] ? r : 0) * K + 8 * c;
            a_dst[j] = S::W_BYTES + r * 256 + ((c ^ (r & 7)) * 16);
        }
        const int t = threadIdx.x;
        side_kind = 0;
        side_src = side_dst = 0;
        if (t < S::S_BYTES / 16) {                               // 8 scales per 16 bytes
            const int col = nt0 * 16 + 8 * t;
            side_kind = col < N ? 1 : 3;                         // 3: past N, zero fill
            side_src = col < N ? col : 0;
            side_dst = S::W_BYTES + S::A_BYTES + 16 * t;
        } else if (t < S::S_BYTES / 16 + S::Z_BYTES / 4) {       // one word per thread: qzeros rows are
            const int c = t - S::S_BYTES / 16, word = nt0 * 2 + c;   // 16-byte aligned only if N % 32 == 0
            side_kind = word < N / 8 ? 2 : 4;
            side_src = word < N / 8 ? word : 0;
            side_dst = S::W_BYTES + S::A_BYTES + S::S_BYTES + 4 * c;
        }
    }

    __device__ __forceinline__ void issue(unsigned char* st, int g, int K, int N, const uint4* __restrict__ qmma,
                                          const unsigned* __restrict__ qzeros, const __nv_bfloat16* __restrict__ scales,
                                          const __nv_bfloat16* __restrict__ A) const {
        uint4* sw = reinterpret_cast<uint4*>(st) + threadIdx.x;
#pragma unroll
        for (int j = 0; j < NW; ++j) cp_async16(sw + 256 * j, qmma + w_src[j] + g * 64, w_ok[j] ? 16 : 0);
#pragma unroll
        for (int j = 0; j < NA; ++j) cp_async16(st + a_dst[j], A + a_src[j] + g * GROUP, a_ok[j] ? 16 : 0);
        if (side_kind == 1 || side_kind == 3)
            cp_async16(st + side_dst, scales + (size_t)g * N + side_src, side_kind == 1 ? 16 : 0);
        else if (side_kind != 0)
            cp_async4(st + side_dst, qzeros + (size_t)g * (N / 8) + side_src, side_kind == 2 ? 4 : 0);
    }
};
// [[/snippet]]

// Visit the output pairs a lane owns: f(v0, v1, row, col) with the two accumulators of columns col, col + 1,
// for rows mt*16 + g + 8p < M and columns col0 + 16 j + 8 h < cols (col0 = the lane's first column).
template <int MT, int NTW, typename F>
__device__ __forceinline__ void marlin_for_each_rc(const float (&acc)[MT][NTW][2][4], int M, int cols, int col0,
                                                   int g, F&& f) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NTW; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const int row = mt * 16 + g + 8 * p, col = col0 + 16 * j + 8 * h;
                    if (row < M && col < cols) f(acc[mt][j][h][2 * p], acc[mt][j][h][2 * p + 1], row, col);
                }
}

// The same with f(v0, v1, row * N + col), col0 = (first n16 tile of the warp) * 16 + 2t over all N columns.
template <int MT, int NTW, typename F>
__device__ __forceinline__ void marlin_for_each_pair(const float (&acc)[MT][NTW][2][4], int M, int N, int col0,
                                                     int g, F&& f) {
    marlin_for_each_rc(acc, M, N, col0, g, [&](float v0, float v1, int row, int col) { f(v0, v1, (size_t)row * N + col); });
}

// The warp's weight words for one k64 half of the stage's group: lane's uint4 of each owned n16 tile
// (one 32-bit word per k16 step), and the A fragments of one k16 step by ldmatrix from the swizzled rows.
template <int NTW>
__device__ __forceinline__ void marlin_w_words(const uint4* sw, int half, uint4 (&wq)[NTW]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NTW; ++j) wq[j] = sw[((warp * NTW + j) * 2 + half) * 32 + lane];
}

template <int MT>
__device__ __forceinline__ void marlin_a_frags(const unsigned char* sa, int ks, unsigned (&a)[MT][4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {                            // row mt*16 + lane%16, k chunk 2 ks + lane/16
        const int r = mt * 16 + (lane & 15), c = 2 * ks + (lane >> 4);
        ldmatrix_x4(a[mt], sa + r * 256 + ((c ^ (r & 7)) * 16));
    }
}

// One stage (one group of the CTA's tile) into the accumulators: per k16 step, ldmatrix.x4 the A fragment
// of each m16 tile; dequantize each owned n16 tile's word into B fragments; 2 mma per (m16, n16) pair.
// [[snippet: marlin_stage]]
template <int MT, int NTW>
__device__ __forceinline__ void marlin_stage_mma(const unsigned char* st, float (&acc)[MT][NTW][2][4]) {
    using S = MarlinStage<MT, NTW>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    const uint4* sw = reinterpret_cast<const uint4*>(st);
    const unsigned char* sa = st + S::W_BYTES;
    const __nv_bfloat16* ss = reinterpret_cast<const __nv_bfloat16*>(st + S::W_BYTES + S::A_BYTES);
    const unsigned* sz = reinterpret_cast<const unsigned*>(st + S::W_BYTES + S::A_BYTES + S::S_BYTES);
    __nv_bfloat162 sb[NTW][2], zb[NTW][2];      // (s, s), (128 + z, 128 + z) of columns g and g + 8
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        const int ntl = warp * NTW + j;
        sb[j][0] = __bfloat162bfloat162(ss[16 * ntl + g]);
        sb[j][1] = __bfloat162bfloat162(ss[16 * ntl + g + 8]);
        zb[j][0] = u32_as_bf162(bf16x2_biased_zero((sz[2 * ntl] >> (4 * g)) & 0xfu));
        zb[j][1] = u32_as_bf162(bf16x2_biased_zero((sz[2 * ntl + 1] >> (4 * g)) & 0xfu));
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        uint4 wq[NTW];
        marlin_w_words<NTW>(sw, half, wq);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            unsigned a[MT][4];
            marlin_a_frags<MT>(sa, half * 4 + kk, a);            // k16 step half * 4 + kk of the group
#pragma unroll
            for (int j = 0; j < NTW; ++j) {
                const unsigned w = kk == 0 ? wq[j].x : kk == 1 ? wq[j].y : kk == 2 ? wq[j].z : wq[j].w;
                dequant_mma_n16(w, zb[j], sb[j], a, acc, j);
            }
        }
    }
}
// [[/snippet]]
