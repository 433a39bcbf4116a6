"""Every SGEMM version on fresh seeded inputs: one element, one row (1 x N x K), one column (M x 1 x K), K of
1, K below a sector's 8 floats, ragged tails of every 32-wide tile in M and N, 37 x 199 x 1823 and 4095 x
4097 x 1023; C poisoned with NaN (beta = 0 must not read it), then alpha and beta != 0 on a random C; writes
past the end of C; and the two peers of the chapter on the same data."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SEED = 2026      # every draw is seeded from SEED and what it is for; assertion names carry the seed
SHAPES = [(1, 1, 1), (1, 4096, 4096), (4096, 1, 4096), (1, 1, 64), (5, 3, 2), (33, 65, 7), (31, 97, 1),
          (32, 32, 32), (63, 33, 129), (37, 199, 1823), (97, 1025, 300), (4095, 4097, 1023)]


def _seed(*what) -> int:
    import zlib
    return (SEED * 1_000_003 + zlib.crc32(repr(what).encode())) % 2**31


def _inputs(M, N, K, *what):
    from utils.arrays import random_normal
    s = _seed(M, N, K, *what)
    a = random_normal((M, K), seed=s)[0]
    b = random_normal((K, N), seed=s + 1)[0]
    c = random_normal((M, N), seed=s + 2)[0]
    return a, b, c, s


def _labels():
    from kernels import sgemm as G
    return list(G.SGEMM)


def _name(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("shape", SHAPES, ids=_name)
@pytest.mark.parametrize("label", _labels())
def test_every_version_with_c_poisoned(label, shape):
    """beta = 0: C holds NaN before the run and every element must be written from A and B alone."""
    from kernels import sgemm as G
    from utils.check import assert_close, poisoned
    a, b, _, seed = _inputs(*shape, "poisoned")
    c = poisoned((shape[0], shape[1]), np.float32)
    G.SGEMM[label](a, b, c)
    assert_close(c, G.reference(a, b), dtype="float32", name=f"{label} {_name(shape)} (seed {seed})")


@pytest.mark.parametrize("shape", [(1, 1, 1), (33, 65, 7), (37, 199, 1823), (1, 4096, 64)], ids=_name)
@pytest.mark.parametrize("label", _labels())
def test_every_version_with_alpha_and_beta(label, shape):
    from kernels import sgemm as G
    from utils.check import assert_close
    a, b, c, seed = _inputs(*shape, "alpha-beta")
    ref = G.reference(a, b, c, alpha=-1.5, beta=0.75)
    G.SGEMM[label](a, b, c, alpha=-1.5, beta=0.75)
    assert_close(c, ref, dtype="float32", name=f"{label} alpha=-1.5 beta=0.75 {_name(shape)} (seed {seed})")


@pytest.mark.parametrize("shape", [(33, 65, 7), (70, 33, 5)], ids=_name)
@pytest.mark.parametrize("label", _labels())
def test_no_version_writes_past_the_end_of_c(label, shape):
    """C is the head of a longer buffer whose tail is poisoned: the tail must still be NaN after the run."""
    import cupy

    from kernels import sgemm as G
    M, N, _ = shape
    a, b, _, _ = _inputs(*shape, "tail")
    buf = cupy.full(M * N + 4096, np.nan, dtype=cupy.float32)
    c = buf[:M * N].reshape(M, N)
    G.SGEMM[label](a, b, c)
    assert bool(cupy.isfinite(c).all()) and bool(cupy.isnan(buf[M * N:]).all())


@pytest.mark.parametrize("label", _labels())
def test_host_arrays_and_wrong_dtypes_get_a_value_error(label):
    import cupy

    from kernels import sgemm as G
    a, b, c, _ = _inputs(4, 5, 6, "errors")
    with pytest.raises(ValueError, match="CUDA device array"):
        G.SGEMM[label](a.get(), b, c)
    with pytest.raises(ValueError, match="dtype float32"):
        G.SGEMM[label](a.astype(cupy.float64), b, c)
    with pytest.raises(ValueError, match="C-contiguous"):
        G.SGEMM[label](a, b, cupy.empty((5, 4), cupy.float32).T)


def test_peers_match_the_reference_and_leave_torch_tf32_as_it_was():
    torch = pytest.importorskip("torch")
    from kernels import sgemm as G
    from kernels.sgemm import ladders
    from utils.arrays import from_torch
    from utils.check import assert_close
    from utils.ladder import Case
    a, b, c, seed = _inputs(37, 199, 1823, "peers")
    case = Case((a, b, c), outputs=(2,))
    ref = G.reference(a, b)
    assert_close(ladders.cublas_peer(case)(), ref, dtype="float32", name=f"cupy.matmul (seed {seed})")
    before = torch.backends.cuda.matmul.allow_tf32
    for setting in (True, False):
        torch.backends.cuda.matmul.allow_tf32 = setting
        out = ladders.torch_peer(case)()
        assert torch.backends.cuda.matmul.allow_tf32 is setting
        assert_close(from_torch(out), ref, dtype="float32", name=f"torch.matmul, TF32 off (seed {seed})")
    torch.backends.cuda.matmul.allow_tf32 = before
