// convert_bench.cuh: the INT4 -> bf16/fp16 conversion benchmark kernel, one instance per conversion
// version (int4_convert_v*.cu).
#pragma once
#include "quant_common.cuh"

// ---------------------------------------------------------------------------------------------------
// INT4 -> bf16 conversion throughput. packed: [n_vec] uint4 (4 words = 32 nibbles per thread);
// out: [n_vec * 32] bf16 (fp16 for v3) in logical element order; the first conversion is stored
// (checked), then `reps` more rounds on perturbed words are XOR-folded into a value that is written
// to `sink` only if it equals a sentinel, which keeps the work alive without touching `out`.
// ---------------------------------------------------------------------------------------------------

// [[snippet: int4_convert_bench]]
#define INT4_CONVERT_KERNEL(NAME, CONVERT)                                                          \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                         \
        const uint4* __restrict__ packed, uint4* __restrict__ out, unsigned* __restrict__ sink,     \
        int n_vec, int reps) {                                                                      \
        const int i = blockIdx.x * blockDim.x + threadIdx.x;                                        \
        if (i >= n_vec) return;                                                                     \
        const uint4 p = packed[i];                                                                  \
        unsigned w[4] = {p.x, p.y, p.z, p.w};                                                       \
        _Pragma("unroll") for (int j = 0; j < 4; ++j) {      /* the checked conversion */           \
            unsigned o[4];                                                                          \
            CONVERT(w[j], o);                                                                       \
            out[4 * (size_t)i + j] = make_uint4(o[0], o[1], o[2], o[3]);                            \
        }                                                                                           \
        unsigned acc[4] = {0u, 0u, 0u, 0u};                                                         \
        for (int r = 0; r < reps; ++r) {                     /* the timed conversions */            \
            _Pragma("unroll") for (int j = 0; j < 4; ++j) {                                         \
                w[j] += 0x9E3779B9u;                         /* new nibbles every round */          \
                unsigned o[4];                                                                      \
                CONVERT(w[j], o);                                                                   \
                acc[j] ^= o[0] ^ o[1] ^ o[2] ^ o[3];                                                \
            }                                                                                       \
        }                                                                                           \
        const unsigned all = acc[0] ^ acc[1] ^ acc[2] ^ acc[3];                                     \
        if (all == 0x7fc17fc1u) sink[0] = all;               /* practically never; keeps acc live */ \
    }
// [[/snippet]]
