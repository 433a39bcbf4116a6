"""Every transpose version, bit-exact on fresh random data with poisoned outputs, awkward shapes included."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

# Not multiples of any tile (32, 8, 128), degenerate rows/columns, rows/cols multiples of 4 with
# partial tiles (the 16-byte path inside, the scalar path at the edges), and one full-size case.
SHAPES = [(1823, 781), (1, 37), (199, 1), (1, 1), (37, 4), (1028, 260), (260, 1028), (96, 4100),
          (2048, 2048)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_version_matches_the_reference(shape):
    import cupy
    from kernels import transpose as T
    from utils.check import assert_close, poisoned
    x = cupy.random.standard_normal(shape, dtype=cupy.float32)
    ref = T.reference(x)
    for label, v in T.VERSIONS.items():
        out = poisoned((shape[1], shape[0]), np.float32)
        v.launch(x, out)
        assert_close(out, ref, dtype="exact", name=f"{label} {shape}")


def test_best_version_on_the_chapter_size():
    import cupy
    from kernels import transpose as T
    from utils.check import assert_close, poisoned
    x = cupy.random.standard_normal((8192, 8192), dtype=cupy.float32)
    out = poisoned((8192, 8192), np.float32)
    T.VERSIONS[T.BEST].launch(x, out)
    assert_close(out, x.T, dtype="exact", name=T.BEST)


def test_launchers_reject_bad_arguments():
    import cupy
    from kernels import transpose as T
    launch = T.VERSIONS["v5_vec4"].launch
    x = cupy.random.standard_normal((64, 32), dtype=cupy.float32)
    with pytest.raises(ValueError, match=r"expected shape \(32, 64\)"):
        launch(x, cupy.empty((64, 32), cupy.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        launch(x.astype(cupy.float64), cupy.empty((32, 64), cupy.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        launch(x.T, cupy.empty((64, 32), cupy.float32))
