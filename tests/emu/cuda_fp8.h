// cuda_fp8.h stand-in for the CPU emulation: quant_common.cuh includes it; nothing the emulated kernels run uses
// an fp8 type.
#pragma once
