// splitk.cuh: deterministic split-K across CTAs (GEMV v2, v5 and the Marlin-style GEMM versions).
#pragma once
#include "gemv_common.cuh"

// ---------------------------------------------------------------------------------------------------
// Split-K across CTAs, deterministic. Every split of a tile writes its fp32 partial sums to a
// workspace [splits, ...]; a counter per tile counts the splits that are done; the CTA that brings
// the count to `splits` sums the partials in split order (the same order whoever arrives last) and
// stores bf16. It also resets the counter, so the counters stay zero between launches on a stream.
// ---------------------------------------------------------------------------------------------------
// [[snippet: splitk_last_arrival]]
__device__ __forceinline__ bool splitk_last_arrival(unsigned* __restrict__ counter, int splits) {
    __shared__ int last;
    __threadfence();                         // this thread's partials reach L2 before the count does
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned done = atomicAdd(counter, 1u);
        last = done == unsigned(splits - 1);
        if (last) *counter = 0u;             // every other split has counted already
    }
    __syncthreads();
    return last;                             // the caller reads the partials with __ldcg (L2, never a stale L1)
}
// [[/snippet]]

// The GEMV's column sums, one per thread (`active` for the threads that own a column col < N): stored as
// bf16 when there is one split, else written to ws [splits, N]; the last split to arrive sums the partials
// in split order. Every thread of the CTA must call it (splitk_last_arrival has barriers).
__device__ __forceinline__ void gemv_splitk_store(float sum, bool active, int col, __nv_bfloat16* __restrict__ out,
                                                  float* __restrict__ ws, unsigned* __restrict__ counter, int split,
                                                  int splits, int N) {
    if (splits == 1) {
        if (active) out[col] = __float2bfloat16_rn(sum);
        return;
    }
    if (active) ws[(size_t)split * N + col] = sum;
    if (splitk_last_arrival(counter, splits) && active) {
        float total = 0.f;
        for (int s = 0; s < splits; ++s) total += __ldcg(ws + (size_t)s * N + col);
        out[col] = __float2bfloat16_rn(total);
    }
}
