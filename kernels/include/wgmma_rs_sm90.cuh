// wgmma_rs_sm90.cuh: the register-sourced ("RS") form of Hopper's warpgroup MMA (sm_90a), for the narrow n a
// W4A16 GEMM at batch 16-64 needs: D [64 x N] (+)= A [64 x 16] (registers) * B [16 x N] (shared memory, through a
// descriptor), bf16 in, fp32 accumulate, N = 16, 32 or 64. tests/emu/wgmma_rs_sm90.cuh is its CPU stand-in.
// Kept apart from wgmma_sm90.cuh (whose fences, groups and waits it uses) so that chapter 12's kernels, which
// include that header, are untouched by it.
//
// A fragment (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts", wgmma .m64nNk16 with A in
// registers, .bf16): warp w of the warpgroup holds rows 16w .. 16w + 15 and, within them, what mma.sync
// m16n8k16 holds of its A: thread (g = lane / 4, t = lane % 4) has
//   a[0] = A[g][2t, 2t+1],  a[1] = A[g+8][2t, 2t+1],  a[2] = A[g][2t+8, 2t+9],  a[3] = A[g+8][2t+8, 2t+9]
// (lower k in the low half). Checked against CUTLASS v4.7.0 include/cute/atom/mma_traits_sm90_gmma.hpp,
// GMMA::ALayout_64x16: thread (4, 8, 4) : (128, 1, 16) and value (2, 2, 2) : (64, 8, 512) over the
// column-major 64 x 16 tile, i.e. m = g + 16w, k = 2t, then k + 1, m + 8, k + 8.
// Operand order (no transpose-A immediate in the RS form: A in registers is always K-major):
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 {d...}, {a0, a1, a2, a3}, desc-b, p, scale-a, scale-b, tnsp-b;
// as in CUTLASS v4.7.0 include/cute/arch/mma_sm90_gmma.hpp (MMA_64x16x16_F32BF16BF16_RS and its wider siblings).
//
// The A registers, like the accumulators, belong to the wgmma until a wgmma_wait covers its group: writing
// them earlier is undefined (the emulation fails on it). The accumulator layout is wgmma_sm90.cuh's.
#pragma once
#include "wgmma_sm90.cuh"

#define WGMMA_RS_D8(o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), \
                       "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
#define WGMMA_RS_IN "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B)
#define WGMMA_RS_HEAD(P) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\nwgmma.mma_async.sync.aligned."
#define WGMMA_RS_TYPES ".f32.bf16.bf16 {"

// D [64 x N] (+)= A [64 x 16] * B [16 x N]: N / 2 fp32 accumulators per thread; SCALE_D = 0 ignores the old D.
// TRANS_B = 0: B K-major in shared memory (k contiguous: the rows of x^T's transpose, x itself); 1: N-major.
template <int N, int TRANS_B>
__device__ __forceinline__ void wgmma_m64nNk16_rs(float (&d)[N / 2], const unsigned (&a)[4],
                                                  unsigned long long desc_b, int scale_d) {
    static_assert(N == 16 || N == 32 || N == 64, "the RS shapes instantiated here: n = 16, 32, 64");
    if constexpr (N == 16) {
        asm volatile(WGMMA_RS_HEAD(13) "m64n16k16" WGMMA_RS_TYPES "%0, %1, %2, %3, %4, %5, %6, %7}, "
                     "{%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}\n"
                     : WGMMA_RS_D8(0) : WGMMA_RS_IN : "memory");
    } else if constexpr (N == 32) {
        asm volatile(WGMMA_RS_HEAD(21) "m64n32k16" WGMMA_RS_TYPES "%0, %1, %2, %3, %4, %5, %6, %7, "
                     "%8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                     : WGMMA_RS_D8(0), WGMMA_RS_D8(8) : WGMMA_RS_IN : "memory");
    } else {
        asm volatile(WGMMA_RS_HEAD(37) "m64n64k16" WGMMA_RS_TYPES "%0, %1, %2, %3, %4, %5, %6, %7, "
                     "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                     "%24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : WGMMA_RS_D8(0), WGMMA_RS_D8(8), WGMMA_RS_D8(16), WGMMA_RS_D8(24) : WGMMA_RS_IN : "memory");
    }
}
#undef WGMMA_RS_D8
#undef WGMMA_RS_IN
#undef WGMMA_RS_HEAD
#undef WGMMA_RS_TYPES
