// mma_sm80.cuh: warp-level tensor-core helpers (mma.sync, ldmatrix) and cp.async (sm_80+), shared by
// chapters 9 and 12.
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

// Shared-memory address of a generic pointer, as the 32-bit operand that ldmatrix and cp.async take.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix.x4: four 8 x 8 b16 matrices from shared memory. Lanes 8i .. 8i+7 give the row addresses
// (16 bytes each) of matrix i; lane (g, t) receives r[i] = matrix i [g][2t, 2t+1]. With lanes 0-15
// pointing at rows 0-15 of k-columns 0-7 and lanes 16-31 at the same rows of k-columns 8-15, r is
// exactly the A fragment of mma.m16n8k16 above.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem_row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(smem_row)));
}

// The "memory" clobbers keep the compiler from moving shared-memory reads across a wait (RAW) or a
// new copy into a slot across the reads of its previous contents (WAR): a kernel whose threads only
// read the slots they filled themselves (w4a16_gemv_v3_ring) has no __syncthreads to do that for it.
// cp.async (sm_80+): copy 16 bytes global -> shared without passing through registers; the copy
// runs in the background until cp_async_wait. src_bytes < 16 reads only that many bytes and fills
// the rest with zeros (0: a pure zero fill, src is not read but must still be a valid address).
// .cg caches in L2 only: streamed weights are read once and should not evict anything from L1.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes = 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
}
// 4-byte cp.async (.ca: the only cache mode the 4- and 8-byte sizes allow). For rows whose start is
// only 4-byte aligned (qzeros rows of N/8 words): a 16-byte cp.async needs a 16-byte-aligned source,
// and a misaligned one silently reads the wrong bytes.
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src, int src_bytes = 4) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async8(void* smem_dst, const void* gmem_src, int src_bytes = 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
                 :: "r"(smem_addr(smem_dst)), "l"(gmem_src), "r"(src_bytes) : "memory");
}
// Close the group of cp.async issued since the last commit (one pipeline stage).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N committed groups are still in flight (the newest N may keep running).
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
