// io_aware.cu: chapter 14, the one small kernel standard (unfused) attention needs besides its two cuBLAS GEMMs
// and chapter 6's softmax (kernels/attention/io_aware.py strings them together). Not a version of an op:
//   attn_causal_fill_bf16  writes `fill` into the entries of a [rows, Sk] bf16 matrix that a row does not see
//                          under the bottom-right causal alignment of kernels/attention (query i sees keys
//                          j <= i + Sk - Sq, i = row mod Sq): -inf into S before the softmax; with
//                          empty_rows_only, 0 into the rows of P that see no key (their softmax is NaN)
#include <cuda_bf16.h>

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
