// gemm_sm90.cu: chapter 13's peer, a real CUTLASS 3.x GEMM for sm_90a built from the nvidia-cutlass wheel's
// headers: C [M][N] = A [M][K] @ B [K][N], row-major bf16, fp32 accumulation, bf16 out (what hgemm computes).
// The kernel is assembled by CUTLASS's CollectiveBuilders: a TMA + wgmma mainloop with two consumer
// warpgroups sharing each 128 x 256 x 64 tile (KernelTmaWarpSpecializedCooperative), 2 x 1 clusters, the
// stage count chosen by the builder from what the TMA epilogue leaves of shared memory.
//
// Unlike the book's other kernels this file is built by nvcc into a shared library (kernels/cutlass_gemm): CUTLASS
// prepares a kernel's parameters, TMA descriptors included, in host code, so the entry point is a host
// function that launches on the caller's stream.
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

// [[snippet: cutlass_sm90]]
using Element = cutlass::bfloat16_t;
using RowMajor = cutlass::layout::RowMajor;
constexpr int kAlign = 8;                            // elements per 16-byte TMA access
using TileShape = Shape<_128, _256, _64>;
using ClusterShape = Shape<_2, _1, _1>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    Element, RowMajor, kAlign, Element, RowMajor, kAlign,
    cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    Element, RowMajor, kAlign,                       // A [M][K], K contiguous
    Element, RowMajor, kAlign,                       // B [K][N], N contiguous
    float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
// [[/snippet]]

// 0: launched; 1: CUTLASS cannot implement the problem; 2: it would need a workspace; 3: initialize failed;
// 4: the launch failed.
extern "C" int cutlass_hgemm_sm90(int M, int N, int K, const void* A, const void* B, void* C, void* stream) {
    auto stride_a = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{}, cute::make_shape(M, K, 1));
    auto stride_b = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{}, cute::make_shape(N, K, 1));
    auto stride_c = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{}, cute::make_shape(M, N, 1));
    auto stride_d = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{}, cute::make_shape(M, N, 1));
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {M, N, K, 1},
                                  {static_cast<const Element*>(A), stride_a, static_cast<const Element*>(B), stride_b},
                                  {{1.0f, 0.0f}, static_cast<const Element*>(C), stride_c, static_cast<Element*>(C), stride_d}};
    Gemm gemm;
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
    if (Gemm::get_workspace_size(args) != 0) return 2;
    const auto s = static_cast<cudaStream_t>(stream);
    if (gemm.initialize(args, nullptr, s) != cutlass::Status::kSuccess) return 3;
    return gemm.run(s) == cutlass::Status::kSuccess ? 0 : 4;
}
