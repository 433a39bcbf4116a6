// mma_sm80.cuh stand-in for the CPU emulation: the same functions as kernels/include/mma_sm80.cuh, done
// by the 32 threads of a warp meeting at the warp's barrier (cuda_emu.h). Register layouts follow the PTX
// ISA as that header's comment states them, so a kernel that feeds mma.sync or ldmatrix the wrong lanes
// gets the wrong answer here too. cp.async is deferred to the wait (cuda_emu.h).
#pragma once
#include "cuda_emu.h"
#include "cuda_bf16.h"

inline float emu_bf16_half(uint64_t reg, int half) {
    return __bfloat162float({static_cast<unsigned short>(half ? (reg >> 16) & 0xffff : reg & 0xffff)});
}

inline void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    uint64_t* mine = emu_warp->slot[emu_lane];
    for (int r = 0; r < 4; ++r) mine[r] = a[r];
    mine[4] = b0;
    mine[5] = b1;
    emu_warp_sync();
    // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2
    // B[k][n]:   lane 4 n + (k % 8) / 2, register 4 + (k >= 8), half k % 2
    const int g = emu_lane >> 2, t = emu_lane & 3;
    float out[4];
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
        float sum = 0.f;
        for (int k = 0; k < 16; ++k) {
            const float x = emu_bf16_half(emu_warp->slot[4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2);
            const float y = emu_bf16_half(emu_warp->slot[4 * col + (k % 8) / 2][4 + (k >= 8)], k % 2);
            sum += x * y;
        }
        out[i] = d[i] + sum;
    }
    emu_warp_sync();   // every lane has read the slots before any lane's next operation writes them
    for (int i = 0; i < 4; ++i) d[i] = out[i];
}

// Lane (g, t) receives, of each 8 x 8 matrix i, row g's 16-bit columns 2t and 2t + 1 (row addresses from
// lanes 8i .. 8i + 7); with `trans`, rows 2t and 2t + 1 of column g.
template <int MATRICES, bool TRANS>
inline void emu_ldmatrix(unsigned* r, const void* smem_row) {
    emu_expect_aligned(smem_row, 16, "ldmatrix: a row address that is not 16-byte aligned");
    emu_warp->slot[emu_lane][0] = reinterpret_cast<uintptr_t>(smem_row);
    emu_warp_sync();
    const int g = emu_lane >> 2, t = emu_lane & 3;
    for (int i = 0; i < MATRICES; ++i) {
        auto row = [&](int j) { return reinterpret_cast<const unsigned short*>(emu_warp->slot[8 * i + j][0]); };
        const unsigned lo = TRANS ? row(2 * t)[g] : row(g)[2 * t];
        const unsigned hi = TRANS ? row(2 * t + 1)[g] : row(g)[2 * t + 1];
        r[i] = lo | (hi << 16);
    }
    emu_warp_sync();
}

inline void ldmatrix_x4(unsigned (&r)[4], const void* smem_row) { emu_ldmatrix<4, false>(r, smem_row); }

inline void cp_async16(void* smem_dst, const void* gmem_src, int src_bytes = 16) {
    emu_expect_aligned(smem_dst, 16, "cp.async: a destination that is not 16-byte aligned");
    emu_expect_aligned(gmem_src, 16, "cp.async: a source that is not 16-byte aligned");
    emu_open_copies.push_back({smem_dst, gmem_src, src_bytes, 16});
}
inline void cp_async_commit() { emu_commit_copies(); }
template <int N>
inline void cp_async_wait() { emu_land_copies(N); }

// Shared-memory addresses as the kernels see them: offsets into the block's shared memory window. Only dynamic
// shared memory (emu_smem, this thread's block's buffer) has one here; descriptors and swizzles are computed
// on these offsets.
inline unsigned smem_offset_in(const unsigned char* base, const void* p) {
    const auto off = reinterpret_cast<const unsigned char*>(p) - base;
    if (off < 0 || off >= static_cast<long>(EMU_SMEM_BYTES))
        emu_fail("smem_addr: not an address in this block's dynamic shared memory", p);
    return static_cast<unsigned>(off);
}
inline unsigned smem_addr(const void* p) { return smem_offset_in(emu_smem, p); }
inline unsigned char* emu_smem_at(unsigned offset) { return emu_smem + offset; }
