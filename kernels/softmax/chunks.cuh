// chunks.cuh: how every softmax version reads and writes a row (chapter 6). A row is a run of 16-byte
// chunks (4 fp32 or 8 bf16); a chunk is one vector access when the row length allows it, element by
// element otherwise. Also pulls in the (m, l) state (online_softmax.cuh) and the warp reductions.
#pragma once

#include <cuda_bf16.h>

#include "common.cuh"
#include "online_softmax.cuh"

// [[snippet: softmax_chunks]]
// A 16-byte chunk of a row as VEC floats: 4 fp32 or 8 bf16. Chunk c holds elements [c*VEC, c*VEC+VEC).
// When the row length is a multiple of VEC every row starts 16-byte aligned and a chunk is one vector
// access; otherwise (or past the end) elements go one by one, missing ones read as -inf (weight 0).
template <typename T> struct Chunk;
template <> struct Chunk<float> { static constexpr int VEC = 4; };
template <> struct Chunk<__nv_bfloat16> { static constexpr int VEC = 8; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void from_float(float& d, float v) { d = v; }
__device__ __forceinline__ void from_float(__nv_bfloat16& d, float v) { d = __float2bfloat16_rn(v); }

__device__ __forceinline__ void load_vec(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&v)[8]) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]));
        v[2 * k] = f.x; v[2 * k + 1] = f.y;
    }
}
__device__ __forceinline__ void store_vec(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[8]) {
    uint4 q;
    unsigned* w = reinterpret_cast<unsigned*>(&q);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *reinterpret_cast<const unsigned*>(&h);
    }
    *reinterpret_cast<uint4*>(p) = q;
}

template <typename T>
__device__ __forceinline__ void load_chunk(const T* __restrict__ row, int c, int cols, bool vec_ok,
                                           float (&v)[Chunk<T>::VEC]) {
    constexpr int VEC = Chunk<T>::VEC;
    const int e0 = c * VEC;
    if (vec_ok && e0 < cols) {
        load_vec(row + e0, v);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = e0 + k < cols ? to_float(row[e0 + k]) : SOFTMAX_NEG_INF;
    }
}

template <typename T>
__device__ __forceinline__ void store_chunk(T* __restrict__ row, int c, int cols, bool vec_ok,
                                            const float (&v)[Chunk<T>::VEC]) {
    constexpr int VEC = Chunk<T>::VEC;
    const int e0 = c * VEC;
    if (vec_ok && e0 < cols) {
        store_vec(row + e0, v);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            if (e0 + k < cols) from_float(row[e0 + k], v[k]);
    }
}
// [[/snippet]]
