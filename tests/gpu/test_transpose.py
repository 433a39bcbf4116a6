"""Every transpose version, bit-exact on fresh seeded random data with poisoned outputs, awkward shapes included."""
import numpy as np
import pytest

from kernels import transpose as T

pytestmark = pytest.mark.gpu

# Not multiples of any tile (32, 8, 128), degenerate rows/columns, rows/cols multiples of 4 with
# partial tiles (the 16-byte path inside, the scalar path at the edges), and one full-size case.
SHAPES = [(1823, 781), (1, 37), (199, 1), (1, 1), (37, 4), (1028, 260), (260, 1028), (96, 4100),
          (2048, 2048)]
SEED = 4


@pytest.mark.parametrize("label", list(T.VERSIONS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_version_matches_the_reference(label, shape):
    from utils.arrays import random_normal
    from utils.check import assert_close, poisoned
    x, seed = random_normal(shape, "float32", seed=SEED + shape[0] * 7 + shape[1])
    out = poisoned((shape[1], shape[0]), np.float32)
    T.VERSIONS[label](x, out)
    assert_close(out, T.reference(x), dtype="exact", name=f"{label} {shape} (seed {seed})")


def test_best_version_on_the_chapter_size():
    from utils.arrays import random_normal
    from utils.check import assert_close, poisoned
    x, seed = random_normal((8192, 8192), "float32", seed=SEED)
    out = poisoned((8192, 8192), np.float32)
    T.VERSIONS[T.BEST](x, out)
    assert_close(out, x.T, dtype="exact", name=f"{T.BEST} (seed {seed})")


def test_versions_reject_bad_arguments():
    import cupy
    v = T.VERSIONS["v5_vec4"]
    x = cupy.zeros((64, 32), dtype=cupy.float32)
    with pytest.raises(ValueError, match=r"expected shape \(32, 64\)"):
        v(x, cupy.empty((64, 32), cupy.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        v(x.astype(cupy.float64), cupy.empty((32, 64), cupy.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        v(x.T, cupy.empty((64, 32), cupy.float32))


@pytest.mark.parametrize("label", list(T.VERSIONS))
def test_the_chapter_ladder_checks_each_version(label):
    """What chapter 4's tl.run does first: every odd shape, fresh seeded inputs, poisoned outputs."""
    assert T.ladder(None).check(label) == len(T.ODD_SHAPES)
