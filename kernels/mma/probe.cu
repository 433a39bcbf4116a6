// probe.cu: chapter 12's probes of the Ampere-way tensor-core building blocks (sm_80 and up), one warp each.
// They load fragments by the formulas of kernels/mma/fragments.py, run one instruction, and write every
// lane's raw registers out, so a test compares each lane with the model (PTX ISA: "Matrix Fragments for
// mma.m16n8k16 with floating point type", "Warp-level matrix load instruction: ldmatrix").
//
// Register dumps are [32 lanes][registers], lane-major; bf16 pairs are packed into one 32-bit register,
// element 2r in the low 16 bits.
#include <cuda_bf16.h>

typedef unsigned int u32;

__device__ __forceinline__ u32 pack_bf16(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (u32)__bfloat16_as_ushort(lo) | ((u32)__bfloat16_as_ushort(hi) << 16);
}

// [[snippet: mma_probe]]
// A [16][16] row-major bf16, B [16][8] (K x N) row-major bf16, C [16][8] fp32. Writes D [16][8] and the
// registers: a_regs [32][4], b_regs [32][2], c_regs [32][4] (what went in), d_regs [32][4] (what came out).
extern "C" __global__ void __launch_bounds__(32)
mma_probe_m16n8k16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                   const float* __restrict__ C, float* __restrict__ D, u32* __restrict__ a_regs,
                   u32* __restrict__ b_regs, float* __restrict__ c_regs, float* __restrict__ d_regs) {
    const int lane = threadIdx.x;
    const int g = lane >> 2, t = lane & 3;            // PTX's groupID, threadID_in_group
    u32 a[4], b[2];
    float c[4], d[4];
    for (int r = 0; r < 4; ++r) {                     // a[r] = elements 2r, 2r+1: row g (+8 if r odd), cols 2t, 2t+1 (+8 if r >= 2)
        const int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        a[r] = pack_bf16(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; ++r) {                     // b[r]: rows k = 2t, 2t+1 (+8 for r = 1), column n = g
        const int k = 2 * t + 8 * r;
        b[r] = pack_bf16(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    for (int i = 0; i < 4; ++i) c[i] = C[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];   // row g (+8 for c2, c3)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int r = 0; r < 4; ++r) a_regs[lane * 4 + r] = a[r];
    for (int r = 0; r < 2; ++r) b_regs[lane * 2 + r] = b[r];
    for (int i = 0; i < 4; ++i) {
        c_regs[lane * 4 + i] = c[i];
        d_regs[lane * 4 + i] = d[i];
        D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
    }
}
// [[/snippet]]

// [[snippet: ldmatrix_probe]]
// A [16][16] and B [16][8] (K x N) row-major bf16, copied to shared memory. ldmatrix.x4 of A with lane l
// pointing at row l % 16, column 8 * (l / 16) -> x4_regs [32][4]; ldmatrix.x2.trans of B with lane l < 16
// pointing at row l -> x2t_regs [32][2] (lanes 16-31 pass an address too; .x2 ignores it).
extern "C" __global__ void __launch_bounds__(32)
ldmatrix_probe(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
               u32* __restrict__ x4_regs, u32* __restrict__ x2t_regs) {
    __shared__ __align__(16) __nv_bfloat16 sA[16 * 16];   // each row 32 bytes: every row address 16-byte aligned
    __shared__ __align__(16) __nv_bfloat16 sB[16 * 8];    // each row 16 bytes
    const int lane = threadIdx.x;
    for (int i = lane; i < 16 * 16; i += 32) sA[i] = A[i];
    for (int i = lane; i < 16 * 8; i += 32) sB[i] = B[i];
    __syncthreads();
    const u32 pa = static_cast<u32>(__cvta_generic_to_shared(&sA[(lane % 16) * 16 + 8 * (lane / 16)]));
    const u32 pb = static_cast<u32>(__cvta_generic_to_shared(&sB[(lane % 16) * 8]));
    u32 r0, r1, r2, r3, s0, s1;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(pa) : "memory");
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(s0), "=r"(s1) : "r"(pb) : "memory");
    x4_regs[lane * 4 + 0] = r0;
    x4_regs[lane * 4 + 1] = r1;
    x4_regs[lane * 4 + 2] = r2;
    x4_regs[lane * 4 + 3] = r3;
    x2t_regs[lane * 2 + 0] = s0;
    x2t_regs[lane * 2 + 1] = s1;
}
// [[/snippet]]

// [[snippet: pack_probe]]
// P [16][16] fp32. Each lane reads its accumulator fragments of the two m16n8 tiles (columns 0-7, 8-15),
// rounds and packs them pairwise with no shuffle -> a_regs [32][4], the A fragment of P in bf16.
extern "C" __global__ void __launch_bounds__(32)
accumulators_to_a_probe(const float* __restrict__ P, u32* __restrict__ a_regs) {
    const int lane = threadIdx.x;
    const int g = lane >> 2, t = lane & 3;
    float c[2][4];
    for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 4; ++i) c[h][i] = P[(g + 8 * (i >> 1)) * 16 + 8 * h + 2 * t + (i & 1)];
    for (int h = 0; h < 2; ++h)
        for (int p = 0; p < 2; ++p) {
            const __nv_bfloat162 v = __floats2bfloat162_rn(c[h][2 * p], c[h][2 * p + 1]);   // .x = low half
            a_regs[lane * 4 + 2 * h + p] = pack_bf16(v.x, v.y);
        }
}
// [[/snippet]]
