// gemm_v3_stripe.cu: W4A16 GEMM v3 (parent v2): v2's stage on a persistent grid of one wave;
// (tile, group) units striped evenly over the CTAs.
#include "marlin_common.cuh"

// ---------------------------------------------------------------------------------------------------
// W4A16 tensor-core GEMM v3: w4a16_marlin's stage, copies and inner loop on a persistent, striped grid
// (as Marlin's own kernel partitions the work). v2's grid is tiles x splits CTAs: at M = 16, 64 tiles x
// 4 splits = 256 CTAs for ~400 resident slots (0.65 of a wave), and a split has to be a whole divisor.
// v3 launches exactly P = SMs x (CTAs per SM) CTAs and linearizes the work into U = tiles x groups units
// (tile-major: the groups of tile 0, then tile 1, ...); CTA c takes units [c U / P, (c+1) U / P), so every
// CTA streams the same number of groups (+-1) and the cp.async pipeline runs straight across tile
// boundaries. When a CTA leaves a tile it flushes its accumulators: directly to C if it covered the
// whole tile, else as a partial into ws [tiles][max_contrib][M][BN] at its rank among the tile's
// contributors (the CTAs c_first(T) .. c_last(T), known from the partition); the last contributor to
// arrive sums the partials in rank order (deterministic) and stores bf16.
// Requires K % 128 == 0, N % 16 == 0, 1 <= M <= 16 MT (as w4a16_marlin).
// ---------------------------------------------------------------------------------------------------
// One thread's copies of one unit (tile T, group g): offsets that do not depend on T or g worked out once.
template <int MT, int NTW>
struct MarlinStripeCopies {
    using S = MarlinStage<MT, NTW>;
    static constexpr int NW = S::NT_CTA * 64 / 256;             // W uint4 per thread: 2 NTW
    static constexpr int NA = 16 * MT * 16 / 256;                // A 16-byte chunks per thread: MT
    int a_src[NA], a_dst[NA];
    bool a_ok[NA];
    int side_kind, side_dst, side_off;                           // 0 none, 1 scales chunk, 2 zero word

    __device__ __forceinline__ MarlinStripeCopies(int M, int K) {
#pragma unroll
        for (int j = 0; j < NA; ++j) {
            const int i = threadIdx.x + 256 * j, r = i / 16, c = i % 16;
            a_ok[j] = r < M;
            a_src[j] = (a_ok[j] ? r : 0) * K + 8 * c;
            a_dst[j] = S::W_BYTES + r * 256 + ((c ^ (r & 7)) * 16);
        }
        const int t = threadIdx.x;
        side_kind = side_dst = side_off = 0;
        if (t < S::S_BYTES / 16) {
            side_kind = 1;
            side_off = 8 * t;                                    // column within the tile
            side_dst = S::W_BYTES + S::A_BYTES + 16 * t;
        } else if (t < S::S_BYTES / 16 + S::Z_BYTES / 4) {
            side_kind = 2;
            side_off = t - S::S_BYTES / 16;                      // zero word within the tile
            side_dst = S::W_BYTES + S::A_BYTES + S::S_BYTES + 4 * side_off;
        }
    }

    __device__ __forceinline__ void issue(unsigned char* st, int T, int g, int K, int N,
                                          const uint4* __restrict__ qmma, const unsigned* __restrict__ qzeros,
                                          const __nv_bfloat16* __restrict__ scales,
                                          const __nv_bfloat16* __restrict__ A) const {
        const int ntiles = N / 16, kchunks = K / 64;
        uint4* sw = reinterpret_cast<uint4*>(st) + threadIdx.x;
#pragma unroll
        for (int j = 0; j < NW; ++j) {                           // n16 tile T NT_CTA + tid / 64 + 4 j
            const int tile = T * S::NT_CTA + (int)(threadIdx.x >> 6) + 4 * j;
            const bool ok = tile < ntiles;
            cp_async16(sw + 256 * j, qmma + ((size_t)(ok ? tile : 0) * kchunks + 2 * g) * 32 + (threadIdx.x & 63),
                       ok ? 16 : 0);
        }
#pragma unroll
        for (int j = 0; j < NA; ++j) cp_async16(st + a_dst[j], A + a_src[j] + g * GROUP, a_ok[j] ? 16 : 0);
        if (side_kind == 1) {
            const int col = T * S::BN + side_off;
            cp_async16(st + side_dst, scales + (size_t)g * N + (col < N ? col : 0), col < N ? 16 : 0);
        } else if (side_kind == 2) {
            const int word = T * (S::BN / 8) + side_off;
            cp_async4(st + side_dst, qzeros + (size_t)g * (N / 8) + (word < N / 8 ? word : 0), word < N / 8 ? 4 : 0);
        }
    }
};

// The CTA whose unit range [c U / P, (c+1) U / P) holds unit u.
__device__ __forceinline__ int stripe_owner(long long u, long long U, int P) {
    return (int)(((u + 1) * P - 1) / U);
}

// [[snippet: w4a16_marlin_v3]]
template <int MT, int NTW, int STAGES>
__global__ void __launch_bounds__(256, MT <= 2 ? 3 : 2) w4a16_marlin_v3_stripe(
    const uint4* __restrict__ qmma,             // [N/16, K/64, 32] uint4
    const unsigned* __restrict__ qzeros,        // [K/128, N/8]
    const __nv_bfloat16* __restrict__ scales,   // [K/128, N]
    const __nv_bfloat16* __restrict__ A,        // [M, K]
    __nv_bfloat16* __restrict__ C,              // [M, N]
    float* __restrict__ ws,                     // [tiles, max_contrib, M, BN] fp32 partials
    unsigned* __restrict__ counters,            // [tiles] zero between launches
    int M, int K, int N, int max_contrib) {
    using S = MarlinStage<MT, NTW>;
    extern __shared__ __align__(16) unsigned char smem[];       // [STAGES][S::BYTES]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int G = K / GROUP, tiles = (N + S::BN - 1) / S::BN, P = gridDim.x, c = blockIdx.x;
    const long long U = (long long)tiles * G;
    const long long u0 = (long long)c * U / P, u1 = (long long)(c + 1) * U / P;
    const int count = (int)(u1 - u0);
    const MarlinStripeCopies<MT, NTW> copies(M, K);
    int T_in = (int)(u0 / G), g_in = (int)(u0 % G);              // the next unit to copy (tile, group)
    auto issue = [&](int s) {                                    // that unit into slot s, then step on
        copies.issue(smem + s * S::BYTES, T_in, g_in, K, N, qmma, qzeros, scales, A);
        if (++g_in == G) { g_in = 0; ++T_in; }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < count) issue(s);
        cp_async_commit();
    }
    float acc[MT][NTW][2][4] = {};
    int T = (int)(u0 / G), grp = (int)(u0 % G);                  // the unit being computed
    int seg_begin = grp;                                         // first group of the current tile segment

    for (int i = 0; i < count; ++i) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int nxt = i + STAGES - 1;
        if (nxt < count) issue(nxt % STAGES);
        cp_async_commit();

        marlin_stage_mma<MT, NTW>(smem + (i % STAGES) * S::BYTES, acc);

        if (grp != G - 1 && i != count - 1) { ++grp; continue; }   // the segment of tile T goes on
        // ---- flush tile T: this CTA covered its groups [seg_begin, grp] ----
        const int colt0 = warp * NTW * 16 + 2 * t;               // lane's first column within the tile
        const int n0 = T * S::BN;
        if (seg_begin == 0 && grp == G - 1) {                    // the whole tile: no partner
            marlin_for_each_rc(acc, M, N - n0, colt0, g, [&](float v0, float v1, int row, int col) {
                *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + n0 + col) = __floats2bfloat162_rn(v0, v1);
            });
        } else {
            const int c_first = stripe_owner((long long)T * G, U, P);
            const int c_last = stripe_owner((long long)T * G + G - 1, U, P);
            float* part = ws + ((size_t)T * max_contrib + (c - c_first)) * M * S::BN;
            marlin_for_each_rc(acc, M, N - n0, colt0, g, [&](float v0, float v1, int row, int col) {
                *reinterpret_cast<float2*>(part + (size_t)row * S::BN + col) = make_float2(v0, v1);
            });
            if (splitk_last_arrival(counters + T, c_last - c_first + 1)) {
                const float* base = ws + (size_t)T * max_contrib * M * S::BN;
                marlin_for_each_rc(acc, M, N - n0, colt0, g, [&](float, float, int row, int col) {
                    float2 sum = make_float2(0.f, 0.f);
                    for (int r = 0; r <= c_last - c_first; ++r) {    // rank order: deterministic
                        const float2 v = __ldcg(reinterpret_cast<const float2*>(base + ((size_t)r * M + row) * S::BN + col));
                        sum.x += v.x;
                        sum.y += v.y;
                    }
                    *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + n0 + col) = __floats2bfloat162_rn(sum.x, sum.y);
                });
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NTW; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][j][h][e] = 0.f;
        seg_begin = grp = 0;                                     // the next tile starts at group 0
        ++T;
    }
    cp_async_wait<0>();
}
// [[/snippet]]
