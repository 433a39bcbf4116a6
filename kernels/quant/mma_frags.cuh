// mma_frags.cuh: INT4 weights shuffled into mma.m16n8k16 B-fragment order, dequantized in registers
// (the W4A16 GEMM versions and GEMV v4 share it).
#pragma once
#include "gemv_common.cuh"   // GROUP, GEMV_THREADS

// ---------------------------------------------------------------------------------------------------
// W4A16 tensor-core GEMM, Marlin-style: C [M, N] = A [M, K] @ dequant(W), M up to 64 (grid.y over 32 rows).
// qmma [N/16, K/64, 32, 4] int32: word j of lane l = (g, t) for n16 tile nt and k64 chunk kc covers the
// k16 tile kt = 4 kc + j; its nibbles i = 0..7 hold W[16 kt + dk_i][16 nt + dn_i] with
//   dk = (2t, 2t+8, 2t, 2t+8, 2t+1, 2t+9, 2t+1, 2t+9),  dn = (g, g, g+8, g+8, g, g, g+8, g+8),
// so the lop3 pairs (i, i+4) are exactly the B registers b0, b1 of the n8 tiles at columns g and g + 8.
// Block: 256 threads = 8 warps, 64 columns (4 n16 tiles) x MT m16 tiles; warp w takes groups w, w + 8, ...
// Requires K % 128 == 0 and N % 16 == 0.
// ---------------------------------------------------------------------------------------------------
#define TC_WARPS 8
#define TC_NT 4                        // n16 tiles per block

// [[snippet: w4a16_dequant_frags]]
// One shuffled int32 -> the B fragments of two m16n8k16 tiles: b[0], b[1] (= b0, b1) of the n8 tile
// at column g, b[2], b[3] of the one at column g + 8 (see pack_mma). lop3 gives 128 + q exactly,
// hsub2 with (128 + z) leaves q - z exactly, hmul2 with s rounds once: the same bf16 as
// "dequantize to bf16, then multiply". 3 shifts + 4 lop3 + 4 hsub2 + 4 hmul2 for 8 weights.
__device__ __forceinline__ void dequant_b_frags(unsigned w, const __nv_bfloat162 (&zb)[2],
                                                const __nv_bfloat162 (&sb)[2], unsigned (&b)[4]) {
    int4x8_to_bf16x8_biased(w, b);
#pragma unroll
    for (int i = 0; i < 4; ++i)
        b[i] = bf162_as_u32(__hmul2(__hsub2(u32_as_bf162(b[i]), zb[i >> 1]), sb[i >> 1]));
}

// One n16 tile for one k16 step: dequantize the lane's word once, use it against every m16 tile of A.
template <int MT, int NT>
__device__ __forceinline__ void dequant_mma_n16(unsigned w, const __nv_bfloat162 (&zb)[2], const __nv_bfloat162 (&sb)[2],
                                                const unsigned (&a)[MT][4], float (&acc)[MT][NT][2][4], int nt) {
    unsigned b[4];
    dequant_b_frags(w, zb, sb, b);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        mma_m16n8k16_bf16(acc[mt][nt][0], a[mt], b[0], b[1]);   // n8 tile at column g
        mma_m16n8k16_bf16(acc[mt][nt][1], a[mt], b[2], b[3]);   // n8 tile at column g + 8
    }
}
// [[/snippet]]
