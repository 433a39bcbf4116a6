// vec4.cuh: the 4-wide global loads and stores of sgemm v5-v9, with both of their paths.
// VEC = true: one 16-byte access. The plan picks it only where K and N are multiples of 4 and A, B, C are
// 16-byte aligned, so a group of 4 starting at a multiple of 4 lies wholly inside its row or wholly
// outside it: one test on its first element is enough.
// VEC = false: four 4-byte accesses, each predicated on its own column (any K, N, any 4-byte alignment).
#pragma once

template <bool VEC>
__device__ __forceinline__ float4 load4(const float* __restrict__ p, int row, int rows, int col, int cols,
                                        int ld) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);      // zeros past an edge add nothing to a dot product
    if (row >= rows) return v;
    const float* q = p + row * ld + col;
    if (VEC) {
        if (col < cols) v = *reinterpret_cast<const float4*>(q);
    } else {
        if (col + 0 < cols) v.x = q[0];
        if (col + 1 < cols) v.y = q[1];
        if (col + 2 < cols) v.z = q[2];
        if (col + 3 < cols) v.w = q[3];
    }
    return v;
}

// C[row, col .. col + 3] = alpha * acc + beta * C; beta == 0 never reads C (it may hold NaN).
template <bool VEC>
__device__ __forceinline__ void store4(float* __restrict__ C, int row, int M, int col, int N, float4 acc,
                                       float alpha, float beta) {
    if (row >= M) return;
    float* q = C + row * N + col;
    if (VEC) {
        if (col >= N) return;
        float4 out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        if (beta != 0.f) {
            const float4 c = *reinterpret_cast<const float4*>(q);
            out.x += beta * c.x; out.y += beta * c.y; out.z += beta * c.z; out.w += beta * c.w;
        }
        *reinterpret_cast<float4*>(q) = out;
    } else {
        const float v[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (col + j < N) q[j] = beta == 0.f ? alpha * v[j] : alpha * v[j] + beta * q[j];
    }
}
