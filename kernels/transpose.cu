// transpose.cu: out = in^T for a rows x cols fp32 matrix, both row-major (C-contiguous):
// out[c * rows + r] = in[r * cols + c]. Every byte is read once and written once, so the bar is the
// device-to-device copy of the same bytes. Versions, each against the one before:
//
//   v0_naive           one element per thread, block (32, 8); a warp reads 32 consecutive floats of a
//                      row (coalesced) and writes them down a column of out (32 rows apart)
//   v1_naive_colread   the same, with the roles swapped: reads strided, writes coalesced
//   v2_smem            32x32 tile staged in shared memory: both global sides coalesced, 4 elements
//                      per thread; reading a tile column is a 32-way bank conflict
//   v3_smem_padded     the tile padded to [32][33]: row r starts in bank r, the conflict is gone
//   v4_smem_swizzled   unpadded tile, element (r, c) stored at column c ^ r: no conflict, no padding
//   v5_vec4            32x128 tile, 16-byte loads and stores on both sides: each thread loads a 4x4
//                      micro-tile as 4 float4, transposes it in registers, and the tile sits in
//                      shared memory already transposed, in 16-byte chunks XOR-swizzled by row
//   v6_vec4_stream     v5 with streaming cache hints (__ldcs / __stcs): the data are touched once
//   v7_vec4_colmajor   v5 (no hints) with the block order turned: blockIdx.x walks down the row tiles,
//                      so the blocks in flight together fill whole rows of `out`
//   v8_vec4_tile64     v7 with 64x128 tiles: 32 elements per thread, 256-byte runs per row of `out`
#include "common.cuh"

// [[snippet: transpose_v0]]
// Block (32, 8): threadIdx.x walks columns of `in`, so a warp reads 128 contiguous bytes of a row
// and writes 32 floats that lie `rows` floats apart in `out`: 32 separate 32-byte sectors.
extern "C" __global__ void transpose_v0_naive(const float* __restrict__ in, float* __restrict__ out,
                                              int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}
// [[/snippet]]

// [[snippet: transpose_v1]]
// Block (32, 8): threadIdx.x walks rows of `in` (= columns of out), so a warp writes 128 contiguous
// bytes of a row of `out` and reads 32 floats that lie `cols` floats apart in `in`.
extern "C" __global__ void transpose_v1_naive_colread(const float* __restrict__ in, float* __restrict__ out,
                                                      int rows, int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    const int c = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
}
// [[/snippet]]

// [[snippet: transpose_tile32]]
// One 32x32 tile per block (32, 8), 4 elements per thread. Phase 1: warp-rows of the tile are read
// from `in` (coalesced) and written to shared memory as rows. Phase 2: lane tx reads the tile's row
// tx at column ty + j -- a column access -- and writes it to row c0 + ty + j of `out` (coalesced).
// LD = 32 puts a whole column in one bank; LD = 33 (padding) or SWIZZLE spreads it over all 32.
template <bool SWIZZLE>
__device__ __forceinline__ int tile_col(int r, int c) { return SWIZZLE ? (c ^ r) : c; }

template <int LD, bool SWIZZLE>
__device__ __forceinline__ void transpose_tile32(const float* __restrict__ in, float* __restrict__ out,
                                                 int rows, int cols) {
    __shared__ float tile[32 * LD];  // [32, LD] floats: tile[r][c] = in[r0 + r][c0 + c]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
#pragma unroll
    for (int j = 0; j < 32; j += 8) {
        const int r = r0 + ty + j, c = c0 + tx;
        if (r < rows && c < cols)
            tile[(ty + j) * LD + tile_col<SWIZZLE>(ty + j, tx)] = in[(size_t)r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 32; j += 8) {
        const int orow = c0 + ty + j;  // row of out = column of in
        const int ocol = r0 + tx;      // column of out = row of in
        if (orow < cols && ocol < rows)
            out[(size_t)orow * rows + ocol] = tile[tx * LD + tile_col<SWIZZLE>(tx, ty + j)];
    }
}

// [[snippet: transpose_v2]]
extern "C" __global__ void transpose_v2_smem(const float* __restrict__ in, float* __restrict__ out,
                                             int rows, int cols) {
    transpose_tile32<32, false>(in, out, rows, cols);
}
// [[/snippet]]
// [[snippet: transpose_v3]]
extern "C" __global__ void transpose_v3_smem_padded(const float* __restrict__ in, float* __restrict__ out,
                                                    int rows, int cols) {
    transpose_tile32<33, false>(in, out, rows, cols);
}
// [[/snippet]]
// [[snippet: transpose_v4]]
extern "C" __global__ void transpose_v4_smem_swizzled(const float* __restrict__ in, float* __restrict__ out,
                                                      int rows, int cols) {
    transpose_tile32<32, true>(in, out, rows, cols);
}
// [[/snippet]]
// [[/snippet]]

// [[snippet: transpose_vec4]]
// Tile: TR rows x 128 columns of `in` (TR = 32 or 64), block (32, 8) = 256 threads, 16 or 32 elements
// per thread. H = TR / 32 micro-tile rows per thread, CH = TR / 4 chunks of 16 bytes per row of `out`.
//   load:  warp w, lane l holds the 4x4 micro-tiles a[h][i] = in[r0 + 32h + 4w + i][c0 + 4l .. 4l + 3]
//          (float4 loads; a warp reads 512 contiguous bytes of each row it touches).
//   smem:  the tile is stored transposed, as rows of `out`: [128 rows][CH chunks of 16 bytes]. Row
//          c = 4l + j receives the micro-tile's column j, (a[h][0].j, ..., a[h][3].j), at logical
//          chunk 8h + w. Chunk k of row c is stored at physical chunk k ^ ((c >> 2) & 7).
//   store: chunk k = idx % CH of row c = idx / CH, idx = t + 256 i: CH consecutive lanes cover one
//          row of the out tile (128 or 256 contiguous bytes of `out`), float4 stores.
// Banks: a 16-byte access is served 8 lanes at a time, and 8 distinct chunks modulo 8 cover all 32 banks:
//   load side  lanes l..l+7 write physical chunks 8h + (w ^ (l & 7)): 8 distinct;
//   store side 8 lanes read 8 consecutive logical chunks of one row, XORed by one constant: 8 distinct.
// Edge tiles, and shapes whose rows or columns are not a multiple of 4 (no 16-byte alignment), take
// the same path through shared memory with guarded scalar global accesses.
// COLMAJOR: blockIdx.x walks the row tiles (down `in`), blockIdx.y the column tiles.
__device__ __forceinline__ float f4_get(const float4& v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

template <bool STREAM>
__device__ __forceinline__ float4 load_f4(const float* p) {
    return STREAM ? __ldcs(reinterpret_cast<const float4*>(p)) : *reinterpret_cast<const float4*>(p);
}

template <bool STREAM>
__device__ __forceinline__ void store_f4(float* p, float4 v) {
    if (STREAM) __stcs(reinterpret_cast<float4*>(p), v);
    else *reinterpret_cast<float4*>(p) = v;
}

template <int TR, bool STREAM, bool COLMAJOR>
__device__ __forceinline__ void transpose_vec4(const float* __restrict__ in, float* __restrict__ out,
                                               int rows, int cols) {
    constexpr int H = TR / 32, CH = TR / 4;
    __shared__ float4 tile[128 * CH];  // [128, CH] float4 chunks = [128, TR] floats: rows of out, swizzled
    const int l = threadIdx.x, w = threadIdx.y, t = w * 32 + l;
    const int r0 = (COLMAJOR ? blockIdx.x : blockIdx.y) * TR;
    const int c0 = (COLMAJOR ? blockIdx.y : blockIdx.x) * 128;
    const bool full = r0 + TR <= rows && c0 + 128 <= cols && (rows % 4) == 0 && (cols % 4) == 0;

    float4 a[H][4];  // H micro-tiles of [4 rows, 4 cols] of in
    if (full) {
#pragma unroll
        for (int h = 0; h < H; ++h)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                a[h][i] = load_f4<STREAM>(in + (size_t)(r0 + 32 * h + 4 * w + i) * cols + c0 + 4 * l);
    } else {
#pragma unroll
        for (int h = 0; h < H; ++h)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = r0 + 32 * h + 4 * w + i, c = c0 + 4 * l;
                const float* p = in + (size_t)r * cols + c;
                const bool ok = r < rows;
                a[h][i] = make_float4(ok && c + 0 < cols ? p[0] : 0.f, ok && c + 1 < cols ? p[1] : 0.f,
                                      ok && c + 2 < cols ? p[2] : 0.f, ok && c + 3 < cols ? p[3] : 0.f);
            }
    }
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // column j of micro-tile h becomes row 4l + j of the out tile
            const int c = 4 * l + j;
            tile[c * CH + 8 * h + (w ^ ((c >> 2) & 7))] =
                make_float4(f4_get(a[h][0], j), f4_get(a[h][1], j), f4_get(a[h][2], j), f4_get(a[h][3], j));
        }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 128 * CH / 256; ++i) {
        const int idx = t + 256 * i, c = idx / CH, k = idx % CH;  // row c of the out tile, chunk k
        const float4 v = tile[c * CH + (k ^ ((c >> 2) & 7))];
        float* p = out + (size_t)(c0 + c) * rows + r0 + 4 * k;
        if (full) {
            store_f4<STREAM>(p, v);
        } else if (c0 + c < cols) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (r0 + 4 * k + j < rows) p[j] = f4_get(v, j);
        }
    }
}
// [[/snippet]]

// [[snippet: transpose_v5]]
extern "C" __global__ void __launch_bounds__(256) transpose_v5_vec4(
    const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    transpose_vec4</*TR=*/32, /*STREAM=*/false, /*COLMAJOR=*/false>(in, out, rows, cols);
}
// [[/snippet]]

// [[snippet: transpose_v6]]
extern "C" __global__ void __launch_bounds__(256) transpose_v6_vec4_stream(
    const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    transpose_vec4</*TR=*/32, /*STREAM=*/true, /*COLMAJOR=*/false>(in, out, rows, cols);
}
// [[/snippet]]

// [[snippet: transpose_v7]]
extern "C" __global__ void __launch_bounds__(256) transpose_v7_vec4_colmajor(
    const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    transpose_vec4</*TR=*/32, /*STREAM=*/false, /*COLMAJOR=*/true>(in, out, rows, cols);
}
// [[/snippet]]

// [[snippet: transpose_v8]]
extern "C" __global__ void __launch_bounds__(256) transpose_v8_vec4_tile64(
    const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    transpose_vec4</*TR=*/64, /*STREAM=*/false, /*COLMAJOR=*/true>(in, out, rows, cols);
}
// [[/snippet]]
