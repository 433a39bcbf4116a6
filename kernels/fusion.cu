// fusion.cu: fused memory-bound epilogues of a transformer layer (chapter 8), bf16 in and out, fp32 math.
// Each kernel reads its inputs once and writes its outputs once; the unfused chain of torch ops it
// replaces writes every intermediate to HBM and reads it back. Versions:
//
//   bias_gelu_v1_vec8     y = gelu_erf(x + b), x [rows, cols], b [cols]: 16-byte loads of 8 bf16,
//                         2 chunks per thread, both loads issued before any math
//   bias_gelu_v2_poly     v1 with GELU as max(v, 0) - |v| 2^Q(|v|) (Q a degree-9 polynomial for
//                         log2 Phi(-|v|)) instead of erff: ~35 -> ~19 SASS instructions per element,
//                         so the kernel is no longer issue-bound at HBM speed
//   bias_gelu_v3_rows4    v2's GELU in a 2-D layout: a thread owns one 16-byte column chunk of 4 rows, so
//                         its bias chunk is loaded once and no chunk index is divided (v1/v2: a modulo)
//   swiglu_v1_vec8        y = silu(x[:, :H]) * x[:, H:], x [rows, 2H] -> y [rows, H] (gate first, as
//                         vLLM's silu_and_mul): the two halves read as 16-byte chunks, 2 per thread
//   add_rmsnorm_v1_vec8   h = x + residual (stored, bf16), y = h * rsqrt(mean(h^2) + eps) * w:
//                         one block of 256 threads per row, the row kept in registers between the
//                         sum of squares and the scaling, so h is never read back
//   rope_neox_v2_tok      (below v1) one block per token, threads laid out (chunk j, head slot): no
//                         division, the cos/sin chunk loaded once per thread, 57 instead of 78 registers
//   rope_neox_v1_vec8     rotate-half (GPT-NeoX) RoPE on q [T, Hq, D] and k [T, Hk, D] in one launch,
//                         cos/sin tables [T, D/2]: each item is 8 pairs (d, d + D/2) of one head
//
// Every kernel has a 16-byte path (taken when the row length, or half-head, is a multiple of 8
// elements: then every chunk is 16-byte aligned given 16-byte aligned base pointers, which the
// problems in fusion.py check) and a scalar path over the same work items for any other width.
#include <cuda_bf16.h>

#include "common.cuh"
#include "fusion_scalar.cuh"

#define FUSE_THREADS 256
#define FUSE_UNROLL 2       // 16-byte chunks (or scalar items) per thread per input stream

typedef __nv_bfloat16 bf16;

// [[snippet: fusion_vec8]]
// 8 bf16 in one 16-byte register quad <-> 8 floats. Widening is exact; narrowing rounds to nearest even.
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return u;
}
// [[/snippet]]

// [[snippet: bias_gelu_v1]]
// Block of 256 threads covers 256 * 2 chunks = 4096 elements. cols % 8 == 0: a chunk never straddles
// two rows, and its bias chunk is (chunk index mod cols/8) -- 8 KB of bias, served from L1/L2.
// The body is shared by v1 and v2, which differ only in the GELU formula (FORM).
enum GeluForm { GELU_ERF = 0, GELU_POLY = 1 };

template <int FORM>
__device__ __forceinline__ float gelu_form(float v) { return FORM == GELU_POLY ? gelu_poly(v) : gelu_erf(v); }

template <int FORM>
__device__ __forceinline__ void bias_gelu_vec8(const bf16* __restrict__ x, const bf16* __restrict__ bias,
                                               bf16* __restrict__ y, int n, int cols) {
    if ((cols & 7) == 0) {
        const int nv = n >> 3, cv = cols >> 3;
        const uint4* x4 = reinterpret_cast<const uint4*>(x);
        const uint4* b4 = reinterpret_cast<const uint4*>(bias);
        uint4* y4 = reinterpret_cast<uint4*>(y);
        const int base = blockIdx.x * (FUSE_THREADS * FUSE_UNROLL) + threadIdx.x;
        uint4 xv[FUSE_UNROLL], bv[FUSE_UNROLL];
#pragma unroll
        for (int u = 0; u < FUSE_UNROLL; ++u) {          // issue every load first: 32 B in flight per chunk
            const int i = base + u * FUSE_THREADS;
            if (i < nv) {
                xv[u] = x4[i];
                bv[u] = __ldg(b4 + i % cv);
            }
        }
#pragma unroll
        for (int u = 0; u < FUSE_UNROLL; ++u) {
            const int i = base + u * FUSE_THREADS;
            if (i < nv) {
                float a[8], b[8];
                unpack8(xv[u], a);
                unpack8(bv[u], b);
#pragma unroll
                for (int e = 0; e < 8; ++e) a[e] = gelu_form<FORM>(a[e] + b[e]);   // fp32 math, one rounding
                y4[i] = pack8(a);
            }
        }
    } else {                                              // any width: the same 4096 elements, one at a time
        const int base = blockIdx.x * (FUSE_THREADS * FUSE_UNROLL * 8) + threadIdx.x;
#pragma unroll 4
        for (int k = 0; k < FUSE_UNROLL * 8; ++k) {
            const int i = base + k * FUSE_THREADS;
            if (i < n)
                y[i] = __float2bfloat16_rn(
                    gelu_form<FORM>(__bfloat162float(x[i]) + __bfloat162float(bias[i % cols])));
        }
    }
}

extern "C" __global__ void __launch_bounds__(FUSE_THREADS)
bias_gelu_v1_vec8(const bf16* __restrict__ x, const bf16* __restrict__ bias, bf16* __restrict__ y,
                  int n, int cols) {
    bias_gelu_vec8<GELU_ERF>(x, bias, y, n, cols);
}
// [[/snippet]]

// [[snippet: bias_gelu_v2]]
// v2: the same loads, stores and indexing; GELU through gelu_poly (fusion_scalar.cuh): 13 instructions
// per element instead of erff's ~28, the same result to 1/40 of half a bf16 ulp.
extern "C" __global__ void __launch_bounds__(FUSE_THREADS)
bias_gelu_v2_poly(const bf16* __restrict__ x, const bf16* __restrict__ bias, bf16* __restrict__ y,
                  int n, int cols) {
    bias_gelu_vec8<GELU_POLY>(x, bias, y, n, cols);
}
// [[/snippet]]

// [[snippet: bias_gelu_v3]]
// v3: the same GELU as v2, a 2-D layout. v1/v2 spend, per chunk of 8 elements, a signed int32 modulo
// (chunk index mod cols/8, ~20 SASS instructions: there is no integer divide unit), a 16-byte bias load,
// 8 bias unpacks and the chunk's 64-bit addresses: ~4 of their ~22 instructions per element. Here a
// thread owns one column chunk (grid.y: column blocks of 256 chunks) of ROWS consecutive rows (grid.x:
// row blocks): its bias chunk is loaded and unpacked once, the row offsets are multiples of the row
// length (one add each), and there is no division at all. ROWS x-chunks are issued before any math
// (ROWS x 16 bytes in flight per thread, v1/v2: 2 x 16). The scalar path (cols % 8 != 0) is the same
// map with one-element chunks.
template <int FORM, int ROWS>
__device__ __forceinline__ void bias_gelu_rows(const bf16* __restrict__ x, const bf16* __restrict__ bias,
                                               bf16* __restrict__ y, int rows, int cols) {
    const int c = blockIdx.y * FUSE_THREADS + threadIdx.x;          // column chunk (or column) of this thread
    const int r0 = blockIdx.x * ROWS;
    const int nr = min(ROWS, rows - r0);                             // rows of this block (last one: fewer)
    if ((cols & 7) == 0) {
        const int cv = cols >> 3;
        if (c >= cv) return;
        const uint4* x4 = reinterpret_cast<const uint4*>(x) + ((size_t)r0 * cv + c);
        uint4* y4 = reinterpret_cast<uint4*>(y) + ((size_t)r0 * cv + c);
        uint4 xv[ROWS];
#pragma unroll
        for (int k = 0; k < ROWS; ++k)                               // every x load first
            if (k < nr) xv[k] = x4[k * cv];
        float bf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(bias) + c), bf);    // once, reused over ROWS rows
#pragma unroll
        for (int k = 0; k < ROWS; ++k) {
            if (k < nr) {
                float a[8];
                unpack8(xv[k], a);
#pragma unroll
                for (int e = 0; e < 8; ++e) a[e] = gelu_form<FORM>(a[e] + bf[e]);
                y4[k * cv] = pack8(a);
            }
        }
    } else {
        if (c >= cols) return;
        const bf16* xr = x + ((size_t)r0 * cols + c);
        bf16* yr = y + ((size_t)r0 * cols + c);
        bf16 xv[ROWS];
#pragma unroll
        for (int k = 0; k < ROWS; ++k)
            if (k < nr) xv[k] = xr[(size_t)k * cols];
        const float bc = __bfloat162float(bias[c]);
#pragma unroll
        for (int k = 0; k < ROWS; ++k)
            if (k < nr)
                yr[(size_t)k * cols] = __float2bfloat16_rn(gelu_form<FORM>(__bfloat162float(xv[k]) + bc));
    }
}

// One extern "C" entry point per (GELU form, rows per thread): bias_gelu_v3's configs (fusion.py) name them.
#define BIAS_GELU_ROWS_KERNEL(NAME, FORM, ROWS)                                                       \
    extern "C" __global__ void __launch_bounds__(FUSE_THREADS)                                       \
    NAME(const bf16* __restrict__ x, const bf16* __restrict__ bias, bf16* __restrict__ y, int rows,  \
         int cols) {                                                                                 \
        bias_gelu_rows<FORM, ROWS>(x, bias, y, rows, cols);                                          \
    }
BIAS_GELU_ROWS_KERNEL(bias_gelu_v3_rows4, GELU_POLY, 4)
// [[/snippet]]
// Tuning instances: other row counts, and v1's erff in v3's layout (splits v1 -> v3 into layout and GELU).
BIAS_GELU_ROWS_KERNEL(bias_gelu_v3_rows2, GELU_POLY, 2)
BIAS_GELU_ROWS_KERNEL(bias_gelu_v3_rows8, GELU_POLY, 8)
BIAS_GELU_ROWS_KERNEL(bias_gelu_erf_rows4, GELU_ERF, 4)

// [[snippet: swiglu_v1]]
// x [rows, 2H]: gate = x[r, 0:H], up = x[r, H:2H]; y [rows, H]. Output chunk i sits in row r = i / (H/8),
// column chunk c; its gate chunk is x4[r * 2(H/8) + c], its up chunk H/8 chunks further.
extern "C" __global__ void __launch_bounds__(FUSE_THREADS)
swiglu_v1_vec8(const bf16* __restrict__ x, bf16* __restrict__ y, int rows, int H) {
    const int n = rows * H;                               // output elements (swiglu_problem: 2n < 2^31)
    if ((H & 7) == 0) {
        const int hv = H >> 3, nv = n >> 3;
        const uint4* x4 = reinterpret_cast<const uint4*>(x);
        uint4* y4 = reinterpret_cast<uint4*>(y);
        const int base = blockIdx.x * (FUSE_THREADS * FUSE_UNROLL) + threadIdx.x;
        uint4 gv[FUSE_UNROLL], uv[FUSE_UNROLL];
#pragma unroll
        for (int u = 0; u < FUSE_UNROLL; ++u) {
            const int i = base + u * FUSE_THREADS;
            if (i < nv) {
                const int r = i / hv, c = i - r * hv;
                gv[u] = x4[2 * r * hv + c];
                uv[u] = x4[2 * r * hv + hv + c];
            }
        }
#pragma unroll
        for (int u = 0; u < FUSE_UNROLL; ++u) {
            const int i = base + u * FUSE_THREADS;
            if (i < nv) {
                float g[8], v[8];
                unpack8(gv[u], g);
                unpack8(uv[u], v);
#pragma unroll
                for (int e = 0; e < 8; ++e) g[e] = silu(g[e]) * v[e];
                y4[i] = pack8(g);
            }
        }
    } else {
        const int base = blockIdx.x * (FUSE_THREADS * FUSE_UNROLL * 8) + threadIdx.x;
#pragma unroll 4
        for (int k = 0; k < FUSE_UNROLL * 8; ++k) {
            const int i = base + k * FUSE_THREADS;
            if (i < n) {
                const int r = i / H, c = i - r * H;
                const float g = __bfloat162float(x[(size_t)2 * r * H + c]);
                const float v = __bfloat162float(x[(size_t)2 * r * H + H + c]);
                y[i] = __float2bfloat16_rn(silu(g) * v);
            }
        }
    }
}
// [[/snippet]]

// [[snippet: add_rmsnorm_v1]]
// One block per row, B = blockDim.x threads (a multiple of 32, at most 1024; the plan picks the
// smallest with D <= 8 * B * RMS_MAX_CHUNKS: 256 for D = 4096). Thread t owns chunks t, t + B of the
// row (16-byte path) or elements t, t + B, ..., t + 15 B (scalar path). h stays in registers
// (h_i[16] floats) from the sum of squares to the scaling: it is never read back from memory.
#define RMS_MAX_CHUNKS 2

__device__ __forceinline__ float block_sum(float v, float* red /* [32] in smem */) {
    v = warp_sum(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    const float t = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0f;
    return warp_sum(t);                                   // every warp sums the partials itself
}

extern "C" __global__ void __launch_bounds__(1024)
add_rmsnorm_v1_vec8(const bf16* __restrict__ x, const bf16* __restrict__ residual,
                    const bf16* __restrict__ w, bf16* __restrict__ residual_out, bf16* __restrict__ y,
                    int rows, int D, float eps) {
    __shared__ float red[32];                             // [B / 32] warp partial sums
    const size_t row = blockIdx.x;
    float h_i[8 * RMS_MAX_CHUNKS];                        // this thread's part of h = x + residual
    float ss = 0.0f;
    if ((D & 7) == 0) {
        const int dv = D >> 3;
        const uint4* x4 = reinterpret_cast<const uint4*>(x + row * D);
        const uint4* r4 = reinterpret_cast<const uint4*>(residual + row * D);
        uint4* ro4 = reinterpret_cast<uint4*>(residual_out + row * D);
        uint4 xv[RMS_MAX_CHUNKS], rv[RMS_MAX_CHUNKS];
#pragma unroll
        for (int k = 0; k < RMS_MAX_CHUNKS; ++k) {        // all loads of the row first
            const int c = threadIdx.x + k * (int)blockDim.x;
            if (c < dv) {
                xv[k] = x4[c];
                rv[k] = r4[c];
            }
        }
#pragma unroll
        for (int k = 0; k < RMS_MAX_CHUNKS; ++k) {
            const int c = threadIdx.x + k * (int)blockDim.x;
            if (c < dv) {
                float a[8], b[8];
                unpack8(xv[k], a);
                unpack8(rv[k], b);
#pragma unroll
                for (int e = 0; e < 8; ++e) a[e] += b[e];
                const uint4 hv = pack8(a);                // h rounded to bf16: what is stored ...
                ro4[c] = hv;
                unpack8(hv, a);                           // ... is what gets normalized
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    h_i[8 * k + e] = a[e];
                    ss += a[e] * a[e];
                }
            }
        }
        const float rstd = rsqrtf(block_sum(ss, red) / D + eps);
        const uint4* w4 = reinterpret_cast<const uint4*>(w);
        uint4* y4 = reinterpret_cast<uint4*>(y + row * D);
#pragma unroll
        for (int k = 0; k < RMS_MAX_CHUNKS; ++k) {
            const int c = threadIdx.x + k * (int)blockDim.x;
            if (c < dv) {
                float g[8], o[8];
                unpack8(__ldg(w4 + c), g);
#pragma unroll
                for (int e = 0; e < 8; ++e) o[e] = h_i[8 * k + e] * rstd * g[e];
                y4[c] = pack8(o);
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8 * RMS_MAX_CHUNKS; ++k) {
            const int c = threadIdx.x + k * (int)blockDim.x;
            if (c < D) {
                const float h = __bfloat162float(__float2bfloat16_rn(
                    __bfloat162float(x[row * D + c]) + __bfloat162float(residual[row * D + c])));
                residual_out[row * D + c] = __float2bfloat16_rn(h);
                h_i[k] = h;
                ss += h * h;
            }
        }
        const float rstd = rsqrtf(block_sum(ss, red) / D + eps);
#pragma unroll
        for (int k = 0; k < 8 * RMS_MAX_CHUNKS; ++k) {
            const int c = threadIdx.x + k * (int)blockDim.x;
            if (c < D) y[row * D + c] = __float2bfloat16_rn(h_i[k] * rstd * __bfloat162float(w[c]));
        }
    }
}
// [[/snippet]]

// [[snippet: rope_neox_v1]]
// Rotate-half RoPE: for d < D/2, out[d] = x[d] cos[t, d] - x[d + D/2] sin[t, d] and
// out[d + D/2] = x[d + D/2] cos[t, d] + x[d] sin[t, d]; cos/sin are [T, D/2] tables (position of
// token t = t). A work item is (token t, head slot s in [0, Hq + Hk), chunk j of the half): slots
// below Hq are heads of q, the rest heads of k. 16-byte path (half % 8 == 0): 8 pairs per item;
// scalar path: 1 pair per item, the same decomposition with chunks of one element.
__device__ __forceinline__ void rope_neox(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                          const bf16* __restrict__ cos_t, const bf16* __restrict__ sin_t,
                                          bf16* __restrict__ q_out, bf16* __restrict__ k_out,
                                          int T, int Hq, int Hk, int half) {
    const int vec = (half & 7) == 0 ? 8 : 1;
    const int nj = half / vec, slots = Hq + Hk;
    const int items = T * slots * nj;                     // rope_problem: items and q/k sizes < 2^31
    const int base = blockIdx.x * (FUSE_THREADS * FUSE_UNROLL) + threadIdx.x;
    const int D = 2 * half;
    if (vec == 8) {
        uint4 x1[FUSE_UNROLL], x2[FUSE_UNROLL], cv[FUSE_UNROLL], sv[FUSE_UNROLL];
        int off[FUSE_UNROLL];                             // element offset of the item's first half
        bool is_q[FUSE_UNROLL];
#pragma unroll
        for (int u = 0; u < FUSE_UNROLL; ++u) {
            const int it = base + u * FUSE_THREADS;
            if (it < items) {
                const int j = it % nj, ts = it / nj, s = ts % slots, t = ts / slots;
                is_q[u] = s < Hq;
                off[u] = (is_q[u] ? (t * Hq + s) : (t * Hk + (s - Hq))) * D + 8 * j;
                const bf16* src = is_q[u] ? q : k;
                x1[u] = *reinterpret_cast<const uint4*>(src + off[u]);
                x2[u] = *reinterpret_cast<const uint4*>(src + off[u] + half);
                cv[u] = __ldg(reinterpret_cast<const uint4*>(cos_t + t * half + 8 * j));
                sv[u] = __ldg(reinterpret_cast<const uint4*>(sin_t + t * half + 8 * j));
            }
        }
#pragma unroll
        for (int u = 0; u < FUSE_UNROLL; ++u) {
            const int it = base + u * FUSE_THREADS;
            if (it < items) {
                float a[8], b[8], c[8], s[8], o1[8], o2[8];
                unpack8(x1[u], a);
                unpack8(x2[u], b);
                unpack8(cv[u], c);
                unpack8(sv[u], s);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    o1[e] = a[e] * c[e] - b[e] * s[e];
                    o2[e] = b[e] * c[e] + a[e] * s[e];
                }
                bf16* dst = is_q[u] ? q_out : k_out;
                *reinterpret_cast<uint4*>(dst + off[u]) = pack8(o1);
                *reinterpret_cast<uint4*>(dst + off[u] + half) = pack8(o2);
            }
        }
    } else {
#pragma unroll
        for (int u = 0; u < FUSE_UNROLL; ++u) {
            const int it = base + u * FUSE_THREADS;
            if (it < items) {
                const int j = it % nj, ts = it / nj, s = ts % slots, t = ts / slots;
                const bool isq = s < Hq;
                const int o = (isq ? (t * Hq + s) : (t * Hk + (s - Hq))) * D + j;
                const bf16* src = isq ? q : k;
                bf16* dst = isq ? q_out : k_out;
                const float a = __bfloat162float(src[o]), b = __bfloat162float(src[o + half]);
                const float c = __bfloat162float(cos_t[t * half + j]);
                const float sn = __bfloat162float(sin_t[t * half + j]);
                dst[o] = __float2bfloat16_rn(a * c - b * sn);
                dst[o + half] = __float2bfloat16_rn(b * c + a * sn);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(FUSE_THREADS)
rope_neox_v1_vec8(const bf16* __restrict__ q, const bf16* __restrict__ k,
                  const bf16* __restrict__ cos_t, const bf16* __restrict__ sin_t,
                  bf16* __restrict__ q_out, bf16* __restrict__ k_out, int T, int Hq, int Hk, int half) {
    rope_neox(q, k, cos_t, sin_t, q_out, k_out, T, Hq, Hk, half);
}
// [[/snippet]]


// [[snippet: rope_neox_v2]]
// v2: one block per token, threads laid out (j, slot) in a 2-D block: blockDim.x = bx chunk positions j
// of the half head (bx = min(nj, 32)), blockDim.y = THREADS / bx head slots. v1 decomposes a flat item
// index with two runtime divisions (by nj and by Hq + Hk, ~40 SASS instructions per item) and loads the
// item's cos/sin chunks every time; here t is blockIdx.x, j and the slot are thread coordinates, and a
// thread loads its cos/sin chunk once and reuses it over its slots (2 for Hq + Hk = 64). v1 holds 78
// registers (3 blocks of 256 threads per SM, 48 KB of q/k in flight per SM); v2 holds 57 (4 blocks, 64 KB;
// capping it at 48 for 5 blocks spills).
#define ROPE_ITEMS 2        // head slots per thread whose loads are issued together

__device__ __forceinline__ int rope_offset(int t, int sl, int Hq, int Hk, int D, bool is_q) {
    return (is_q ? t * Hq + sl : t * Hk + (sl - Hq)) * D;     // element offset of head slot sl of token t
}

extern "C" __global__ void __launch_bounds__(FUSE_THREADS)
rope_neox_v2_tok(const bf16* __restrict__ q, const bf16* __restrict__ k,
                 const bf16* __restrict__ cos_t, const bf16* __restrict__ sin_t,
                 bf16* __restrict__ q_out, bf16* __restrict__ k_out, int T, int Hq, int Hk, int half) {
    const int t = blockIdx.x, slots = Hq + Hk, D = 2 * half;
    const int by = blockDim.y;
    if ((half & 7) == 0) {
        const int nj = half >> 3;
        for (int j = threadIdx.x; j < nj; j += blockDim.x) {
            float c[8], s[8];
            unpack8(__ldg(reinterpret_cast<const uint4*>(cos_t + t * half) + j), c);
            unpack8(__ldg(reinterpret_cast<const uint4*>(sin_t + t * half) + j), s);
            for (int s0 = threadIdx.y; s0 < slots; s0 += ROPE_ITEMS * by) {
                uint4 x1[ROPE_ITEMS], x2[ROPE_ITEMS];
#pragma unroll
                for (int u = 0; u < ROPE_ITEMS; ++u) {              // every q/k load of the batch first
                    const int sl = s0 + u * by;
                    if (sl < slots) {
                        const bool is_q = sl < Hq;
                        const bf16* src = (is_q ? q : k) + rope_offset(t, sl, Hq, Hk, D, is_q) + 8 * j;
                        x1[u] = *reinterpret_cast<const uint4*>(src);
                        x2[u] = *reinterpret_cast<const uint4*>(src + half);
                    }
                }
#pragma unroll
                for (int u = 0; u < ROPE_ITEMS; ++u) {
                    const int sl = s0 + u * by;
                    if (sl < slots) {
                        const bool is_q = sl < Hq;
                        float a[8], b[8], o1[8], o2[8];
                        unpack8(x1[u], a);
                        unpack8(x2[u], b);
#pragma unroll
                        for (int e = 0; e < 8; ++e) {
                            o1[e] = a[e] * c[e] - b[e] * s[e];
                            o2[e] = b[e] * c[e] + a[e] * s[e];
                        }
                        bf16* dst = (is_q ? q_out : k_out) + rope_offset(t, sl, Hq, Hk, D, is_q) + 8 * j;
                        *reinterpret_cast<uint4*>(dst) = pack8(o1);
                        *reinterpret_cast<uint4*>(dst + half) = pack8(o2);
                    }
                }
            }
        }
    } else {                                                      // one pair (j, j + half) per item
        for (int j = threadIdx.x; j < half; j += blockDim.x) {
            const float c = __bfloat162float(cos_t[t * half + j]), sn = __bfloat162float(sin_t[t * half + j]);
            for (int sl = threadIdx.y; sl < slots; sl += by) {
                const bool is_q = sl < Hq;
                const int o = rope_offset(t, sl, Hq, Hk, D, is_q) + j;
                const bf16* src = is_q ? q : k;
                bf16* dst = is_q ? q_out : k_out;
                const float a = __bfloat162float(src[o]), b = __bfloat162float(src[o + half]);
                dst[o] = __float2bfloat16_rn(a * c - b * sn);
                dst[o + half] = __float2bfloat16_rn(b * c + a * sn);
            }
        }
    }
}
// [[/snippet]]
