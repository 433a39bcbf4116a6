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


# --- chapter 11: both paths of v5-v9, every layout of v6, every config of v9, the sweep --------------

VEC4 = ["v5_vec4", "v6_swizzle", "v7_double_buffer", "v8_warptile", "v9_tuned"]
# (shape, offsets of a, b, c in floats): the 16-byte path where all allow it, else the 4-byte one
PATHS = [((128, 128, 64), (0, 0, 0), True), ((300, 520, 40), (0, 0, 0), True), ((37, 200, 1824), (0, 0, 0), True),
         ((128, 128, 64), (1, 0, 0), False), ((300, 520, 40), (0, 2, 0), False), ((37, 200, 1824), (0, 0, 3), False),
         ((129, 258, 64), (0, 0, 0), False), ((64, 64, 63), (0, 0, 0), False), ((1, 4096, 4096), (1, 1, 1), False)]


def _offset_view(x, off):
    """``x`` copied into a buffer at ``off`` floats past a 256-byte boundary: 4-byte aligned, 16 only if off % 4 == 0."""
    import cupy
    buf = cupy.full(x.size + 8, np.nan, dtype=cupy.float32)
    v = buf[off:off + x.size].reshape(x.shape)
    v[...] = x
    return v


@pytest.mark.parametrize("case", PATHS, ids=lambda c: f"{_name(c[0])}-off{''.join(map(str, c[1]))}")
@pytest.mark.parametrize("label", VEC4)
@pytest.mark.parametrize("beta", [0.0, 0.75])
def test_vec4_versions_on_both_paths(label, case, beta):
    from kernels import sgemm as G
    from utils.check import assert_close
    shape, offs, vec = case
    a, b, c, seed = _inputs(*shape, "paths", offs)
    a, b, c = (_offset_view(x, o) for x, o in zip((a, b, c), offs))
    if beta == 0.0:
        c[...] = np.nan
    ref = G.reference(a, b, c, alpha=1.25, beta=beta)
    v = G.SGEMM[label]
    (ln,) = v.launches(v.validate(a, b, c, alpha=1.25, beta=beta))
    assert G.is_vec_instance(ln.kernel) == vec, ln.kernel
    v(a, b, c, alpha=1.25, beta=beta)
    assert_close(c, ref, dtype="float32", name=f"{label} {ln.kernel} {_name(shape)} offsets {offs} (seed {seed})")


@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 199, 1823), (300, 520, 40), (1, 4096, 4096), (4095, 4097, 1023)],
                         ids=_name)
@pytest.mark.parametrize("label", ["v6_swizzle", "v9_tuned"])
def test_every_config_of_v6_and_v9(label, shape):
    from kernels import sgemm as G
    from utils.check import assert_close, poisoned
    a, b, _, seed = _inputs(*shape, "configs")
    ref = G.reference(a, b)
    for config in G.SGEMM[label].all_configs():
        c = poisoned((shape[0], shape[1]), np.float32)
        G.SGEMM[label](a, b, c, config=config)
        assert_close(c, ref, dtype="float32", name=f"{label} {config} {_name(shape)} (seed {seed})")


def test_tune_records_every_config_and_tuned_config_reads_the_best(tmp_path):
    from kernels import sgemm as G
    from utils.record import Record
    rec = Record("11-tiled-gemm", gpu="gpu-test", root=tmp_path)
    shape, configs = (512, 512, 256), list(G.V9_CONFIGS[:3])
    best = G.tune(rec, [shape], configs)
    hits = G.swept(rec, shape)
    assert sorted(c for c, _ in hits) == sorted(configs) and best[shape] == hits[0][0]
    assert G.tuned_config(rec, shape) == hits[0][0] and hits[0][1]["metric"] >= hits[-1][1]["metric"]
