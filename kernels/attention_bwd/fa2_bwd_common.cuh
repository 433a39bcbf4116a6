// fa2_bwd_common.cuh: what the FlashAttention-2 backward kernels (chapter 16) share beyond the forward's headers:
// where a (batch, head)'s rows live (dense or varlen), float loads, the lane offsets of the four ldmatrix patterns the backward reads, and the
// two-float atomic add that accumulates dQ. Swizzle and fragment layouts are the forward's (fa2_tiles.cuh,
// mma_sm80.cuh): rows of W bf16 with 16-byte chunk c of row r stored at chunk c ^ (r % 8).
#pragma once
#include "fa2_tiles.cuh"

// [[snippet: bwd_seq]]
// Where the rows of one (batch b, head h) live, in a dense [B, H, S, D] tensor (cu == nullptr) or in varlen's
// packed [T, H, D] (sequence b is rows cu[b] .. cu[b + 1] - 1, T = cu[B]): row0, the element offset of its row 0;
// stride, the elements from one row to the next; lse0, the offset of its row 0 in a per-row array laid out
// [B, H, S] (dense) or [H, T] (varlen: the forward's lse); S, its rows. flash-attention's BlockInfo
// (csrc/flash_attn/src/block_info.h) makes the same choice on cu_seqlens being null.
struct BwdSeq {
    size_t row0, lse0;
    int stride, S;
};
template <int D>
__device__ __forceinline__ BwdSeq bwd_seq(const int* cu, int b, int h, int H, int S, int T) {
    if (cu == nullptr) return {((size_t)b * H + h) * S * D, ((size_t)b * H + h) * S, D, S};
    const int r0 = cu[b];
    return {((size_t)r0 * H + h) * D, (size_t)h * T + r0, H * D, cu[b + 1] - r0};
}
// [[/snippet]]

// Copy N floats (a multiple of 4, the source padded so that every chunk exists) by 16-byte cp.async, one chunk
// each for threads first .. first + N / 4 - 1; the others copy nothing.
template <int N>
__device__ __forceinline__ void bwd_load_floats(float* dst, const float* src, int first) {
    const int c = threadIdx.x - first;
    if (c >= 0 && c < N / 4) cp_async16(dst + 4 * c, src + 4 * c);
}

// [[snippet: bwd_lane_offsets]]
// Where a lane's ldmatrix rows lie in a swizzled tile of rows W elements wide, computed once per kernel (as the
// forward's Fa2LaneOffsets): every row a lane addresses has row % 8 = lane % 8, and its chunk index is an even
// constant plus one bit of the lane, so chunk 8 (c / 8) + ((c % 8) ^ x) needs four low parts u = c % 8 / 2.
//   a:  A operand, 16 rows from row0, plain (rows = M, chunks = k):       + 64 (kk / 4), u = kk % 4
//   b:  B operand read from [n][k] rows, plain (two n8 tiles, one k16):   + 8 n W + 64 (kk / 4), u = kk % 4
//   bt: B operand read from [k][n] rows, transposed (k16 x two n8 tiles): + 16 kk W + 64 (n / 8), u = n / 2 % 4
// b's pattern also reads an A operand stored [k][m] when transposed (dS^T read as dS, see the dK/dV kernel).
// The static forms take u at run time, for a warp whose tile position is only known at run time.
template <int W>
struct BwdLaneOffsets {
    int a[4], b[4], bt[4];
    __device__ __forceinline__ static int plain_a(int u, int lane) {            // rows +16, chunk + lane / 16
        return (lane % 16) * W + 8 * ((2 * u) ^ ((lane / 16) ^ (lane % 8)));
    }
    __device__ __forceinline__ static int plain_b(int u, int lane) {            // rows +8 (m / 2), chunk + m % 2
        const int m = lane / 8;
        return (8 * (m / 2) + lane % 8) * W + 8 * ((2 * u) ^ ((m % 2) ^ (lane % 8)));
    }
    __device__ __forceinline__ static int trans_b(int u, int lane) {            // rows +8 (m % 2), chunk + m / 2
        const int m = lane / 8;
        return (8 * (m % 2) + lane % 8) * W + 8 * ((2 * u) ^ ((m / 2) ^ (lane % 8)));
    }
    __device__ __forceinline__ BwdLaneOffsets(int row0, int lane) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            a[u] = row0 * W + plain_a(u, lane);
            b[u] = plain_b(u, lane);
            bt[u] = trans_b(u, lane);
        }
    }
};
// [[/snippet]]

// dQ accumulation: two adjacent floats added to global memory. Hopper has a vector reduction (one instruction,
// one L2 transaction for the pair, PTX ISA 8.1, sm_90); elsewhere two scalar atomics.
__device__ __forceinline__ void bwd_atomic_add2(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" :: "l"(p), "f"(x), "f"(y) : "memory");
#else
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
#endif
}
