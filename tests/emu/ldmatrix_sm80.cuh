// ldmatrix_sm80.cuh stand-in for the CPU emulation (see mma_sm80.cuh beside this file).
#pragma once
#include "mma_sm80.cuh"

inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem_row) { emu_ldmatrix<4, true>(r, smem_row); }
inline void ldmatrix_x2_trans(unsigned (&r)[2], const void* smem_row) { emu_ldmatrix<2, true>(r, smem_row); }
