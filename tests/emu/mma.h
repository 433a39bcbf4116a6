// <mma.h> stand-in for the CPU emulation: the WMMA subset hgemm v0 uses (16 x 16 x 16, bf16 row-major
// operands, fp32 accumulators). The real fragment layout is opaque, so here every lane holds the whole
// tile; store_matrix_sync splits the writes over the lanes, so a kernel that reads the stored tile before
// a __syncwarp reads some elements unwritten.
#pragma once
#include <type_traits>
#include "cuda_emu.h"
#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation knows 16 x 16 x 16 only");
    float v[256];   // [16][16], row-major
};

template <class F>
inline void fill_fragment(F& f, float x) {
    for (float& e : f.v) e = x;
}

template <class Use, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p,
                             unsigned ldm) {
    static_assert(std::is_same_v<Layout, row_major>, "the emulation knows row-major operands only");
    emu_expect_aligned(p, 32, "wmma::load_matrix_sync: a pointer that is not 32-byte aligned");
    if (ldm % 8) emu_fail("wmma::load_matrix_sync: ldm of 16-bit elements must be a multiple of 8", p);
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) f.v[r * 16 + c] = __bfloat162float(p[r * ldm + c]);
}

template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
    float out[256];
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
            float s = 0.f;
            for (int k = 0; k < 16; ++k) s += a.v[i * 16 + k] * b.v[k * 16 + j];
            out[i * 16 + j] = c.v[i * 16 + j] + s;
        }
    std::memcpy(d.v, out, sizeof out);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
    if (layout != mem_row_major) emu_fail("wmma::store_matrix_sync: the emulation knows mem_row_major only", p);
    emu_expect_aligned(p, 32, "wmma::store_matrix_sync: a pointer that is not 32-byte aligned");
    for (unsigned e = emu_lane; e < 256; e += 32) p[(e / 16) * ldm + e % 16] = f.v[e];
}
}  // namespace wmma
}  // namespace nvcuda
