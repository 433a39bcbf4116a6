// atile.cuh: the layouts of the transposed A tile in shared memory, sgemm v6-v9 (v06_swizzle.cu says why).
// LAYOUT = 1: rows padded to BM + 32 / BK floats. LAYOUT = 2: element (k, m) at column m ^ ((k / 4) * (128 / BK))
// of row k, a permutation of each row (tests/test_sgemm_host.py checks the Python model, kernels/sgemm's
// a_tile_index, is a bijection per row and spreads a warp's stores over 32 banks).
#pragma once

// [[snippet: sgemm_atile]]
// As: BK rows of BM (+ pad) floats; ATile::at(k, m) is where element (k, m) of the transposed A tile lives.
template <int BM, int BK, int LAYOUT>
struct ATile {
    static_assert(LAYOUT == 1 || LAYOUT == 2, "1: padding, 2: XOR swizzle");
    static_assert(LAYOUT != 1 || (32 / BK) % 4 == 0, "padding keeps LDS.128 aligned only for BK <= 8");
    static_assert(BM % 32 == 0 && BK >= 4 && BK <= 32, "the swizzle permutes 32-float groups");
    static constexpr int LD = LAYOUT == 1 ? BM + 32 / BK : BM;
    static constexpr int SIZE = BK * LD;
    __device__ static __forceinline__ int at(int k, int m) {
        return k * LD + (LAYOUT == 2 ? m ^ ((k >> 2) * (128 / BK)) : m);
    }
};
// [[/snippet]]
