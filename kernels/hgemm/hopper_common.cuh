// hopper_common.cuh: what chapter 12's Hopper-way GEMMs (v4 on) share: the shared-memory matrix descriptors of
// the 128-byte-swizzled tiles TMA writes, one warpgroup's k-slice of wgmma, the epilogue from wgmma's
// accumulators, and the tile order. C [M][N] = A [M][K] @ B [K][N], all row-major bf16, fp32 accumulation.
//
// Tiles in shared memory, each stage aligned to 1024 bytes (the 128-byte swizzle repeats every 8 rows of 128
// bytes, and wgmma applies it to the address bits):
//   A: [BM][64] bf16, one TMA box of BM rows x 64 columns (128 bytes a row), K-major;
//   B: BN/64 boxes of [64 k][64 n] bf16, each 8 KiB, one after another: MN-major (n contiguous).
// BK = 64: one box of A and BN/64 boxes of B per stage.
#pragma once
#include <cuda_bf16.h>
#include "tma_sm90.cuh"
#include "wgmma_sm90.cuh"
#include "tile_order.cuh"

typedef __nv_bfloat16 bf16;

constexpr int HOPPER_BK = 64;                 // k per stage: one 128-byte row of A
constexpr int SW128_ATOM = 1024;              // bytes: 8 rows of 128 bytes, the swizzle's period
constexpr int B_BOX_BYTES = 64 * 64 * 2;      // one [64 k][64 n] box of B
// v5, v6: registers per thread after setmaxnreg: 128 producer threads x 40 + 256 consumers x 232 <= 65536
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

// [[snippet: gmma_desc]]
// A shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): bits 0-13 the start address / 16,
// 16-29 the leading-dimension byte offset / 16, 32-45 the stride-dimension byte offset / 16, 62-63 the
// layout (1: 128-byte swizzle). For the 128-byte swizzle (CUTLASS's canonical GMMA layouts, in 16-byte units):
//   K-major (A):  8 rows of 128 bytes (64 k each) make one atom; SBO = the stride between atoms along M
//                 (1024 bytes); LBO is unused (1).
//   MN-major (B): one 128-byte row holds 64 n of one k, 8 rows (k) make one atom; LBO = the stride between
//                 64-wide groups along N (one box, 8 KiB), SBO = the stride between 8-row groups along K
//                 (1024 bytes).
__device__ __forceinline__ unsigned long long gmma_desc_sw128(const void* smem, unsigned lbo_bytes,
                                                             unsigned sbo_bytes) {
    const unsigned long long start = (smem_addr(smem) & 0x3FFFF) >> 4;
    return start | ((unsigned long long)((lbo_bytes >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((sbo_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

// The k-step j (16 k) of a stage: A's rows [m0, m0 + 64) start 32 j bytes into each 128-byte row; B's 16 k
// rows start 2048 j bytes into each box.
__device__ __forceinline__ unsigned long long a_desc(const bf16* a_stage, int m0, int j) {
    return gmma_desc_sw128(reinterpret_cast<const char*>(a_stage) + m0 * 128 + 32 * j, 16, SW128_ATOM);
}
__device__ __forceinline__ unsigned long long b_desc(const bf16* b_stage, int j) {
    return gmma_desc_sw128(reinterpret_cast<const char*>(b_stage) + 2048 * j, B_BOX_BYTES, SW128_ATOM);
}
// [[/snippet]]

// [[snippet: wgmma_stage]]
// One warpgroup: acc += A [m0 .. m0 + 64) x B over the stage's 64 k, in 4 wgmmas of k16, one commit group.
template <int BN>
__device__ __forceinline__ void wgmma_stage(float (&acc)[BN / 2], const bf16* a_stage, const bf16* b_stage, int m0) {
    static_assert(BN == 128 || BN == 256, "the wgmma shapes instantiated in wgmma_sm90.cuh");
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < HOPPER_BK / 16; ++j) {
        if constexpr (BN == 128) wgmma_m64n128k16<1>(acc, a_desc(a_stage, m0, j), b_desc(b_stage, j), 1);
        else wgmma_m64n256k16<1>(acc, a_desc(a_stage, m0, j), b_desc(b_stage, j), 1);
    }
    wgmma_commit();
}
// [[/snippet]]

// [[snippet: wgmma_store]]
// The epilogue of one warpgroup's 64 x BN accumulators (rows m0 .., columns n0 ..): thread (warp w, lane g, t)
// holds, per n8 block j, rows 16 w + g and 16 w + g + 8 at columns 8 j + 2 t, + 1. Stored as bf16x2 where the
// pair is inside C and 4-byte aligned (N even and C itself 4-byte aligned: TMA's alignment rules cover A
// and B, not C), one element at a time at the edge or where C is only 2-byte aligned.
template <int BN>
__device__ __forceinline__ void store_wgmma_tile(const float (&acc)[BN / 2], bf16* __restrict__ C, int M, int N,
                                                 int m0, int n0) {
    const int lane = threadIdx.x % 32, w = (threadIdx.x / 32) % 4, g = lane >> 2, t = lane & 3;
    const bool pairs = N % 2 == 0 && reinterpret_cast<size_t>(C) % 4 == 0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = m0 + 16 * w + g + 8 * h, col = n0 + 8 * j + 2 * t;
            if (row >= M) continue;
            const float x = acc[4 * j + 2 * h], y = acc[4 * j + 2 * h + 1];
            if (col + 1 < N && pairs) {
                *reinterpret_cast<__nv_bfloat162*>(C + row * N + col) = __floats2bfloat162_rn(x, y);
            } else {
                if (col < N) C[row * N + col] = __float2bfloat16(x);
                if (col + 1 < N) C[row * N + col + 1] = __float2bfloat16(y);
            }
        }
}
// [[/snippet]]

constexpr int C_CHUNK_BYTES = 64 * 64 * 2;    // v8: one consumer warpgroup's 64 x 64 staging tile of C

// [[snippet: wgmma_store_tma]]
// v8's epilogue of one warpgroup's 64 x BN accumulators (rows m0 .., columns n0 ..), 64 columns at a time
// through `staging` ([64][64] bf16, 1024-byte aligned, 128-byte swizzled as the TMA map of C says): wait until
// the previous chunk's store has read the buffer, write the chunk (each thread its bf16x2 pairs, at the
// swizzled address), make the writes visible to the async proxy, and let `signals` (one thread of the
// warpgroup) issue the store. TMA clips the box at C's edges.
template <int BN>
__device__ __forceinline__ void store_wgmma_tile_tma(const float (&acc)[BN / 2], bf16* staging, const TmaDescriptor* map_c,
                                                     int m0, int n0, bool signals) {
    const int lane = threadIdx.x % 32, w = (threadIdx.x / 32) % 4, g = lane >> 2, t = lane & 3;
    unsigned char* base = reinterpret_cast<unsigned char*>(staging);
#pragma unroll
    for (int chunk = 0; chunk < BN / 64; ++chunk) {
        if (signals) tma_store_wait_read<0>();
        warpgroup_sync();                             // the buffer is free for every thread of the warpgroup
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int jj = 8 * chunk + j, row = 16 * w + g + 8 * h;
                const unsigned byte = row * 128 + (8 * j + 2 * t) * 2;
                *reinterpret_cast<__nv_bfloat162*>(base + (byte ^ (((byte >> 7) & 7) << 4))) =
                    __floats2bfloat162_rn(acc[4 * jj + 2 * h], acc[4 * jj + 2 * h + 1]);
            }
        fence_proxy_async_smem();                     // these generic-proxy writes before TMA's reads
        warpgroup_sync();
        if (signals) {
            tma_store_2d(map_c, n0 + 64 * chunk, m0, staging);
            tma_store_commit();
        }
    }
}
// [[/snippet]]

// The dynamic shared-memory buffer rounded up to the swizzle atom (the launch asks for SW128_ATOM extra bytes).
__device__ __forceinline__ unsigned char* atom_aligned(unsigned char* raw) {
    return raw + (SW128_ATOM - smem_addr(raw) % SW128_ATOM) % SW128_ATOM;
}
