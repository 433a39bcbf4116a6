// pack.cu: chapter 12's way around TMA's alignment rules. TMA reads a matrix only where its rows start a
// multiple of 16 bytes apart and its base is aligned, so a 4095 x 4095 bf16 matrix (rows 8190 bytes apart)
// is out of its reach. These two kernels copy such an operand into a buffer whose rows are padded with zeros
// to a multiple of 8 elements, and copy the padded product back out: O(MK + KN + MN) bytes moved for
// O(MNK) FLOPs, so the fast kernel runs where it otherwise could not.
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

// [[snippet: hgemm_pack]]
// dst [dst_rows][dst_cols] = src [rows][cols] with zeros to the right and below (dst_cols even, dst 4-byte
// aligned). One thread per pair of dst elements, consecutive threads on consecutive pairs: each warp reads 64
// contiguous bytes of src (2-byte loads, whatever src's alignment) and writes 128 contiguous bytes of dst.
extern "C" __global__ void hgemm_pack(const bf16* __restrict__ src, int rows, int cols, bf16* __restrict__ dst,
                                      int dst_rows, int dst_cols) {
    const long long per_row = dst_cols / 2, pairs = (long long)dst_rows * per_row;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < pairs;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / per_row;
        const int c = 2 * (int)(i - r * per_row);
        const unsigned lo = r < rows && c < cols ? __bfloat16_as_ushort(src[r * cols + c]) : 0u;
        const unsigned hi = r < rows && c + 1 < cols ? __bfloat16_as_ushort(src[r * cols + c + 1]) : 0u;
        *reinterpret_cast<unsigned*>(dst + r * dst_cols + c) = lo | (hi << 16);
    }
}

// dst [rows][cols] = the first cols columns of src [rows][src_cols] (src_cols even, src 4-byte aligned). One
// thread per pair of src elements: a 4-byte read, one or two 2-byte writes, contiguous across the warp.
extern "C" __global__ void hgemm_unpack(const bf16* __restrict__ src, int src_cols, bf16* __restrict__ dst, int rows,
                                        int cols) {
    const long long per_row = src_cols / 2, pairs = (long long)rows * per_row;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < pairs;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / per_row;
        const int c = 2 * (int)(i - r * per_row);
        const unsigned v = *reinterpret_cast<const unsigned*>(src + r * src_cols + c);
        if (c < cols) dst[r * cols + c] = __ushort_as_bfloat16((unsigned short)(v & 0xffffu));
        if (c + 1 < cols) dst[r * cols + c + 1] = __ushort_as_bfloat16((unsigned short)(v >> 16));
    }
}
// [[/snippet]]
