"""Chapter 13's CUTLASS peer on the GPU: correct on fresh seeded bf16 inputs with C poisoned (tails in every
dimension that CUTLASS's 16-byte TMA accesses allow), and a clear error for shapes it cannot take."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SEED = 2026


@pytest.mark.parametrize("shape", [(256, 512, 320), (1, 8, 8), (300, 264, 72), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_cutlass_gemm_matches_the_reference(shape):
    from kernels import cutlass_gemm as CG
    from kernels import hgemm as H
    from utils.arrays import bf16, random_normal
    from utils.check import assert_close, poisoned
    from utils.gpu import missing_features
    if missing_features(["wgmma"]):
        pytest.skip("CUTLASS's sm90 GEMM needs a Hopper GPU (wgmma)")
    M, N, K = shape
    a = random_normal((M, K), "bfloat16", seed=SEED + M)[0]
    b = random_normal((K, N), "bfloat16", seed=SEED + N)[0]
    c = poisoned((M, N), bf16())
    CG.gemm(a, b, c)
    assert_close(c, H.reference(a, b), dtype="bfloat16", name=f"CUTLASS sm90 {shape} (seed {SEED})")


def test_cutlass_gemm_refuses_what_tma_cannot_read():
    import cupy

    from kernels import cutlass_gemm as CG
    from utils.arrays import bf16
    a, b, c = cupy.zeros((8, 7), bf16()), cupy.zeros((7, 8), bf16()), cupy.zeros((8, 8), bf16())
    with pytest.raises(ValueError, match="multiples of 8"):
        CG.gemm(a, b, c)
    with pytest.raises(ValueError, match="dtype bfloat16"):
        CG.gemm(a.astype(np.float32), b, c)
