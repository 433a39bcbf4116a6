// io_aware.cu: chapter 14, the two small kernels standard (unfused) attention needs around its two cuBLAS GEMMs
// and chapter 6's softmax (kernels/attention/io_aware.py strings them together). Not versions of an op:
//   attn_scale_bf16        y = x * scale over a bf16 array (Q scaled once before S = Q K^T, as PyTorch's math
//                          path scales its operands; cupy.matmul takes no alpha)
//   attn_causal_fill_bf16  writes `fill` into the entries of a [rows, Sk] bf16 matrix that a row does not see
//                          under the bottom-right causal alignment of kernels/attention (query i sees keys
//                          j <= i + Sk - Sq, i = row mod Sq): -inf into S before the softmax; with
//                          empty_rows_only, 0 into the rows of P that see no key (their softmax is NaN)
#include <cuda_bf16.h>

// [[snippet: attn_scale_bf16]]
extern "C" __global__ void attn_scale_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                           unsigned long long n, float scale) {
    // 8 elements (16 bytes) a step; both pointers are fresh allocations (256-byte aligned), n any size
    const unsigned long long chunks = n / 8, stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long c = first; c < chunks; c += stride) {
        uint4 raw = reinterpret_cast<const uint4*>(x)[c];
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(h[e]);
            h[e] = __floats2bfloat162_rn(f.x * scale, f.y * scale);
        }
        reinterpret_cast<uint4*>(y)[c] = raw;
    }
    for (unsigned long long i = 8 * chunks + first; i < n; i += stride)     // the tail, fewer than 8
        y[i] = __float2bfloat16(__bfloat162float(x[i]) * scale);
}
// [[/snippet]]

// [[snippet: attn_causal_fill_bf16]]
extern "C" __global__ void attn_causal_fill_bf16(__nv_bfloat16* __restrict__ x, long long rows, int Sq, int Sk,
                                                 int empty_rows_only, float fill) {
    const __nv_bfloat16 f = __float2bfloat16(fill);
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {             // one row a block at a time
        const int i = (int)(r % Sq);
        const int seen = max(0, min(Sk, i + Sk - Sq + 1));                  // keys 0 .. seen - 1 are visible
        const int from = empty_rows_only ? (seen == 0 ? 0 : Sk) : seen;
        __nv_bfloat16* row = x + r * (long long)Sk;
        for (int j = from + threadIdx.x; j < Sk; j += blockDim.x) row[j] = f;
    }
}
// [[/snippet]]
