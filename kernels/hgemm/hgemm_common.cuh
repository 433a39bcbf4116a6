// hgemm_common.cuh: the pieces chapter 12's Ampere-way bf16 GEMMs share (v1-v3): shared-memory tile
// layouts, global -> shared tile loads, one warp's mma.sync over a staged k-slice, and the bf16 epilogue.
// C [M][N] = A [M][K] @ B [K][N], all row-major bf16, fp32 accumulation; offsets are 32-bit (the host
// refuses matrices of 2^31 elements or more).
#pragma once
#include <cuda_bf16.h>
#include "ldmatrix_sm80.cuh"
#include "tile_order.cuh"

typedef __nv_bfloat16 bf16;

// --- shared-memory layouts: element offset of (row, col) in a [ROWS][COLS] bf16 tile -------------------
// Both keep every 16-byte chunk (8 bf16 of one row) whole and 16-byte aligned, as cp.async and ldmatrix
// need; they differ in where a row's chunks go.

// [[snippet: hgemm_layouts]]
template <int COLS>
struct RowMajor {
    static __device__ __forceinline__ int at(int row, int col) { return row * COLS + col; }
};

// XOR swizzle of 16-byte chunks. ldmatrix reads 8 rows at the same column in one go: 8 x 16 bytes that
// are conflict-free only if they fall in 8 different 16-byte bank groups (32 banks = 8 groups of 4).
// A 128-byte line of shared memory holds LINE = 8 / CHUNKS rows (rows narrower than a line) or one row;
// XOR-ing the chunk index with the row's line number (mod the chunks per line) sends the 8 rows of one
// logical chunk to 8 different groups. A row of 64 bytes (BK = 32): chunk ^= (row / 2) % 4.
template <int COLS>
struct Swizzled {
    static constexpr int CHUNKS = COLS / 8;                    // 16-byte chunks per row
    static constexpr int LINE = CHUNKS >= 8 ? 1 : 8 / CHUNKS;  // rows per 128-byte line
    static constexpr int MASK = (CHUNKS >= 8 ? 8 : CHUNKS) - 1;
    static_assert(COLS % 8 == 0 && (CHUNKS & (CHUNKS - 1)) == 0, "rows of a power-of-two number of 16-byte chunks");
    static __device__ __forceinline__ int at(int row, int col) {
        const int chunk = (col >> 3) ^ ((row / LINE) & MASK);
        return row * COLS + (chunk << 3) + (col & 7);
    }
};
// [[/snippet]]

// --- global -> shared ---------------------------------------------------------------------------------
// A [ROWS][COLS] tile of a row-major rows x cols matrix g, from (row0, col0), into s; zeros outside the
// matrix, so the mma of a tail tile adds nothing. NT threads share the 16-byte chunks.

// [[snippet: hgemm_load_sync]]
// Through registers, in two halves so that a pipeline can put work between them: fetch_tile issues the
// global loads of this thread's chunks into registers, put_tile stores them to shared memory (where the
// stores wait for the loads). VEC: cols % 8 == 0 and g 16-byte aligned, so a chunk is wholly inside or
// outside and one 16-byte load moves it; otherwise each element is tested and loaded on its own.
template <int ROWS, int COLS, int NT>
struct TileChunks {
    static_assert(ROWS * COLS / 8 % NT == 0, "every thread moves the same number of chunks");
    static constexpr int PER_THREAD = ROWS * COLS / 8 / NT;
    uint4 v[PER_THREAD];
    // row and column of this thread's i-th chunk in the tile
    static __device__ __forceinline__ int row(int i) { return (threadIdx.x + i * NT) / (COLS / 8); }
    static __device__ __forceinline__ int col(int i) { return (threadIdx.x + i * NT) % (COLS / 8) * 8; }
};

template <int ROWS, int COLS, int NT, bool VEC>
__device__ __forceinline__ void fetch_tile(TileChunks<ROWS, COLS, NT>& t, const bf16* __restrict__ g, int rows,
                                           int cols, int row0, int col0) {
    using T = TileChunks<ROWS, COLS, NT>;
#pragma unroll
    for (int i = 0; i < T::PER_THREAD; ++i) {
        const int gr = row0 + T::row(i), gc = col0 + T::col(i);
        t.v[i] = make_uint4(0, 0, 0, 0);
        if (VEC) {
            if (gr < rows && gc < cols) t.v[i] = *reinterpret_cast<const uint4*>(g + gr * cols + gc);
        } else if (gr < rows) {
            unsigned w[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const unsigned lo = gc + 2 * j < cols ? __bfloat16_as_ushort(g[gr * cols + gc + 2 * j]) : 0u;
                const unsigned hi = gc + 2 * j + 1 < cols ? __bfloat16_as_ushort(g[gr * cols + gc + 2 * j + 1]) : 0u;
                w[j] = lo | (hi << 16);
            }
            t.v[i] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}

template <int ROWS, int COLS, int NT, class Layout>
__device__ __forceinline__ void put_tile(bf16* s, const TileChunks<ROWS, COLS, NT>& t) {
    using T = TileChunks<ROWS, COLS, NT>;
#pragma unroll
    for (int i = 0; i < T::PER_THREAD; ++i) *reinterpret_cast<uint4*>(s + Layout::at(T::row(i), T::col(i))) = t.v[i];
}

template <int ROWS, int COLS, int NT, class Layout, bool VEC>
__device__ __forceinline__ void load_tile_sync(bf16* s, const bf16* __restrict__ g, int rows, int cols, int row0,
                                               int col0) {
    TileChunks<ROWS, COLS, NT> t;
    fetch_tile<ROWS, COLS, NT, VEC>(t, g, rows, cols, row0, col0);
    put_tile<ROWS, COLS, NT, Layout>(s, t);
}
// [[/snippet]]

// [[snippet: hgemm_load_async]]
// With cp.async: 16 bytes global -> shared without registers, running until cp_async_wait. A chunk
// outside the matrix is a zero fill (source size 0; the address must still be valid: g itself).
// Needs cols % 8 == 0 and g 16-byte aligned (the VEC path).
template <int ROWS, int COLS, int NT, class Layout>
__device__ __forceinline__ void load_tile_async(bf16* s, const bf16* __restrict__ g, int rows, int cols,
                                                int row0, int col0) {
    constexpr int CHUNKS = ROWS * COLS / 8;
    static_assert(CHUNKS % NT == 0, "every thread moves the same number of chunks");
#pragma unroll
    for (int i = 0; i < CHUNKS / NT; ++i) {
        const int chunk = threadIdx.x + i * NT;
        const int r = chunk / (COLS / 8), c = (chunk % (COLS / 8)) * 8;
        const int gr = row0 + r, gc = col0 + c;
        const bool inside = gr < rows && gc < cols;
        cp_async16(s + Layout::at(r, c), inside ? g + gr * cols + gc : g, inside ? 16 : 0);
    }
}
// [[/snippet]]

// --- one warp's tile -----------------------------------------------------------------------------------

// [[snippet: hgemm_warp_mma]]
// acc [WM/16][WN/8] m16n8 accumulators (4 floats per lane each) += As [wm0 .. +WM][0 .. BK) @
// Bs [0 .. BK)[wn0 .. +WN), 16 k at a time. A fragments by ldmatrix.x4: lane l points at row l % 16,
// k-chunk l / 16 of an m16 x k16 block. B fragments of two n8 tiles by ldmatrix.x4.trans: matrix
// i = l / 8 is k rows 8 (i & 1) .. +7 of n columns 8 (i >> 1) .. +7.
template <int BK, int WM, int WN, class LA, class LB>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[WM / 16][WN / 8][4], const bf16* As, const bf16* Bs,
                                              int wm0, int wn0, int lane) {
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "whole m16 x n16 x k16 steps");
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        unsigned a[WM / 16][4], b[WN / 8][2];
#pragma unroll
        for (int mi = 0; mi < WM / 16; ++mi)
            ldmatrix_x4(a[mi], As + LA::at(wm0 + mi * 16 + lane % 16, kk + 8 * (lane / 16)));
#pragma unroll
        for (int nj = 0; nj < WN / 16; ++nj) {
            unsigned r[4];
            ldmatrix_x4_trans(r, Bs + LB::at(kk + lane % 8 + 8 * ((lane / 8) & 1), wn0 + nj * 16 + 8 * (lane / 16)));
            b[2 * nj][0] = r[0];
            b[2 * nj][1] = r[1];
            b[2 * nj + 1][0] = r[2];
            b[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < WM / 16; ++mi)
#pragma unroll
            for (int ni = 0; ni < WN / 8; ++ni) mma_m16n8k16_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
}
// [[/snippet]]

// [[snippet: hgemm_store]]
// The epilogue: lane (g, t) of an m16n8 accumulator holds rows g and g + 8, columns 2t and 2t + 1. Each
// pair is rounded to bf16 and stored as one 4-byte bf16x2 where the pair is inside C and VEC (N even, C
// 4-byte aligned); one element at a time at the right edge or off the VEC path.
template <int WM, int WN, bool VEC>
__device__ __forceinline__ void store_tile(const float (&acc)[WM / 16][WN / 8][4], bf16* __restrict__ C, int M,
                                           int N, int m0, int n0, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < WM / 16; ++mi)
#pragma unroll
        for (int ni = 0; ni < WN / 8; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + mi * 16 + g + 8 * h, col = n0 + ni * 8 + 2 * t;
                if (row >= M) continue;
                const float x = acc[mi][ni][2 * h], y = acc[mi][ni][2 * h + 1];
                if (VEC && col + 1 < N) {
                    *reinterpret_cast<__nv_bfloat162*>(C + row * N + col) = __floats2bfloat162_rn(x, y);
                } else {
                    if (col < N) C[row * N + col] = __float2bfloat16(x);
                    if (col + 1 < N) C[row * N + col + 1] = __float2bfloat16(y);
                }
            }
}
// [[/snippet]]
