"""Chapter 13's collective GEMM (hgemm v9) on the GPU: on fresh seeded bf16 inputs with C poisoned it matches the
reference on tails, misaligned pointers and the shapes of chapter 12's ladder, and it produces v8's result bit
for bit (the same wgmmas in the same order)."""
import pytest

pytestmark = pytest.mark.gpu

SEED = 2613
SHAPES = [(1, 1, 1), (37, 199, 1823), (300, 264, 72), (256, 512, 320), (4095, 4097, 4095), (1024, 1024, 1024)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_v9_matches_the_reference_and_v8(shape):
    import cupy

    from kernels import gemm_sm90 as G
    from kernels import hgemm as H
    from utils.arrays import bf16, random_normal
    from utils.check import assert_close, poisoned
    from utils.gpu import missing_features
    v9 = G.COLLECTIVE["v9_collective"]
    if missing_features(v9.requires):
        pytest.skip(f"hgemm v9 needs {', '.join(missing_features(v9.requires))}")
    M, N, K = shape
    seed = SEED + M + 7 * N + 13 * K
    a = random_normal((M, K), "bfloat16", seed=seed)[0]
    b = random_normal((K, N), "bfloat16", seed=seed + 1)[0]
    c9, c8 = poisoned((M, N), bf16()), poisoned((M, N), bf16())
    v9(a, b, c9)
    H.HGEMM["v8_tma_store"](a, b, c8)
    assert_close(c9, H.reference(a, b), dtype="bfloat16", name=f"v9 {shape} (seed {seed})")
    assert bool(cupy.all(c9.view(cupy.uint16) == c8.view(cupy.uint16))), f"v9 differs from v8 on {shape} (seed {seed})"
