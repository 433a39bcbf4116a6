// mma_sm80.cuh: warp-level tensor-core helpers (mma.sync, sm_80+), shared by chapters 9 and 12.
//
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, per lane (g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major) 4 regs of bf16x2: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//                                             a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, "col")      2 regs of bf16x2: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
//   C, D (16 x 8) fp32     d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1]
// (lower k / lower column in the low half of each register)
#pragma once

// D += A * B for one 16 x 8 x 16 tile, fp32 accumulation.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
