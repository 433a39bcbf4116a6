// fa2_tiles.cuh: how the pipelined FlashAttention forward versions (chapter 15, v2 on) stage Q, K and V tiles in
// shared memory: rows of D bf16 with their 16-byte chunks XOR-swizzled by the row (chunk c of row r at chunk
// c ^ (r % 8)), so that the eight rows one ldmatrix phase reads fall in eight different bank groups, filled by
// 16-byte cp.async with rows past the sequence zero-filled.
#pragma once
#include "fa2_common.cuh"
#include "ldmatrix_sm80.cuh"

// Element (r, c) of a [rows][D] bf16 tile stored with 16-byte chunks XOR-swizzled by the row.
template <int D>
__device__ __forceinline__ int fa2_swz(int r, int c) {
    return r * D + (((c >> 3) ^ (r & 7)) << 3) + (c & 7);
}

// Copy rows [row0, row0 + ROWS) of a [S][D] head into a swizzled tile by 16-byte cp.async; rows at or past S are
// zero-filled (src_bytes 0: nothing is read). All THREADS threads of the block take part (128 in the forward; the
// backward's key-tile kernel runs 4 or 8 warps), each copying the same chunk of every PASS-th row: since PASS is a
// multiple of 8, the chunk's swizzled place is the same in each of those rows, so the addresses advance by a
// constant. The caller commits the group.
// ``stride``: elements from one row of the head to the next (D for [B, H, S, D]; H D for varlen's packed [T, H, D]).
template <int ROWS, int D, int THREADS = 128>
__device__ __forceinline__ void fa2_load_tile(__nv_bfloat16* tile, const __nv_bfloat16* head, int row0, int S,
                                              int stride = D) {
    constexpr int CHUNKS = D / 8, PASS = THREADS / CHUNKS;          // 16-byte chunks a row; rows a pass copies
    static_assert(PASS % 8 == 0 && ROWS % PASS == 0, "fa2_load_tile: whole passes of 8k rows");
    const int r = threadIdx.x / CHUNKS, c = threadIdx.x % CHUNKS;
    __nv_bfloat16* dst = tile + r * D + 8 * (c ^ (r % 8));
    const __nv_bfloat16* src = head + (size_t)(row0 + r) * stride + 8 * c;
#pragma unroll
    for (int p = 0; p < ROWS / PASS; ++p) {
        const bool in = row0 + r + p * PASS < S;
        cp_async16(dst + p * PASS * D, in ? src + (size_t)p * PASS * stride : head, in ? 16 : 0);
    }
}
