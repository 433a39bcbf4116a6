// ldmatrix_sm80.cuh: the transposing shared-memory matrix loads (sm_80+) that chapter 12's GEMM and the
// FlashAttention chapters read row-major B and V tiles with. mma_sm80.cuh (chapter 9) holds mma.sync,
// the plain ldmatrix.x4 and cp.async; this header adds what a [K][N] row-major operand needs.
//
// ldmatrix.trans delivers each 8 x 8 b16 matrix transposed: lanes 8i .. 8i+7 give the addresses of
// rows 0-7 of matrix i (16 bytes each, 16-byte aligned), and lane (g = lane / 4, t = lane % 4) receives
// r[i] = { matrix_i[2t][g], matrix_i[2t + 1][g] } (low half first). For a tile stored [k][n], that is
// B[k = 2t, 2t + 1][n = g]: exactly the B fragment ("col") of mma.m16n8k16.
#pragma once
#include "mma_sm80.cuh"

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(smem_row)));
}

__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(smem_row)));
}
