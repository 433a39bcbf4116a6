// warptile.cuh: the body of sgemm v8 and v9 (v8 launches it as it is; v9 adds a tile order and occupancy
// hint around it). v7's structure (two stages, XOR-swizzled As, 4-wide accesses) with the block tile cut in
// three levels: the BM x BN block tile into warp tiles of WM x WN, each warp tile into WMITER x WNITER
// sub-tiles of (WM / WMITER) x (WN / WNITER), and every sub-tile into 4 x 4 thread tiles, one per lane.
// What it buys against v7:
// - a warp's lanes read one contiguous run of As (WM / WMITER floats) and of Bs (WN / WNITER floats) per
//   sub-tile row: at most 128 bytes each, so every LDS.128 is conflict-free and the warp's footprint in
//   shared memory is a compact rectangle, not rows spread across the whole block tile;
// - the thread tile (4 * WMITER) x (4 * WNITER) and the warp tile become parameters of their own, which is
//   what v9 tunes.
#pragma once
#include "stage.cuh"

// [[snippet: sgemm_warptile]]
// NT = (BM / WM) * (BN / WN) * 32 threads. Warp w: warp tile row w / (BN / WN), column w % (BN / WN). Lane l:
// 4 x 4 thread tile at sub-tile row l / (WSN / 4), column l % (WSN / 4), repeated WMITER x WNITER times.
// LOADS is stage.cuh's Stage (v8, and v9 on shapes with edges) or iterator.cuh's InteriorLoads (v9 when the tiles
// divide the shape): how a slice gets from global memory into
// registers; everything else is the same.
template <int BM, int BN, int BK, int WM, int WN, int WNITER, bool VEC,
          template <int, int, int, int, bool> class LOADS = Stage>
__device__ __forceinline__ void warptile_gemm(int M, int N, int K, float alpha, const float* __restrict__ A,
                                              const float* __restrict__ B, float beta, float* __restrict__ C,
                                              int tile_m, int tile_n) {
    constexpr int NT = (BM / WM) * (BN / WN) * 32;
    constexpr int WMITER = WM * WN / (32 * 16 * WNITER);   // 16 results per lane per sub-tile
    constexpr int WSM = WM / WMITER, WSN = WN / WNITER;     // sub-tile: WSM x WSN
    static_assert(BM % WM == 0 && BN % WN == 0 && WMITER >= 1 && WM % WMITER == 0 && WN % WNITER == 0,
                  "warp tiles and sub-tiles must divide the tiles above them");
    static_assert((WSM / 4) * (WSN / 4) == 32, "one 4 x 4 thread tile per lane in every sub-tile");
    static_assert(BK % 4 == 0 && BN % 4 == 0, "4-wide groups");
    using St = LOADS<BM, BN, BK, NT, VEC>;
    using AT = typename St::AT;
    __shared__ __align__(16) float As[2][St::A_SIZE];
    __shared__ __align__(16) float Bs[2][St::B_SIZE];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;   // the warp tile in the block
    const int lm = (lane / (WSN / 4)) * 4, ln = (lane % (WSN / 4)) * 4;       // the lane in a sub-tile
    const int m0 = tile_m * BM, n0 = tile_n * BN;
    const int tiles = (K + BK - 1) / BK;

    St next(A, B, M, N, K, m0, n0, tid);
    float acc[WMITER * 4][WNITER * 4] = {};          // row mi * 4 + i, column ni * 4 + j
    float a[WMITER * 4], b[WNITER * 4];
    next.load(A, B, M, N, K, m0, n0, 0, tid);
    next.stash(As[0], Bs[0], tid);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int s = t & 1;
        if (t + 1 < tiles) next.load(A, B, M, N, K, m0, n0, (t + 1) * BK, tid);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int mi = 0; mi < WMITER; ++mi) {
                const float4 v = *reinterpret_cast<const float4*>(&As[s][AT::at(k, wm0 + mi * WSM + lm)]);
                a[mi * 4] = v.x; a[mi * 4 + 1] = v.y; a[mi * 4 + 2] = v.z; a[mi * 4 + 3] = v.w;
            }
#pragma unroll
            for (int ni = 0; ni < WNITER; ++ni) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[s][k * BN + wn0 + ni * WSN + ln]);
                b[ni * 4] = v.x; b[ni * 4 + 1] = v.y; b[ni * 4 + 2] = v.z; b[ni * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < WMITER * 4; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * 4; ++j)
                    acc[i][j] += a[i] * b[j];
        }
        if (t + 1 < tiles) next.stash(As[s ^ 1], Bs[s ^ 1], tid);   // last read before the previous barrier
        __syncthreads();
    }
#pragma unroll
    for (int mi = 0; mi < WMITER; ++mi)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int ni = 0; ni < WNITER; ++ni) {
                const float* r = &acc[mi * 4 + i][ni * 4];
                store4<VEC>(C, m0 + wm0 + mi * WSM + lm + i, M, n0 + wn0 + ni * WSN + ln, N,
                            make_float4(r[0], r[1], r[2], r[3]), alpha, beta);
            }
}
// [[/snippet]]
