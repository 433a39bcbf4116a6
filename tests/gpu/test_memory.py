"""The chapter-4 microbenchmarks compute what their references say (small sizes, fresh random data)."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("ws", [256, 16 << 10, 1 << 20])
def test_pointer_chase_ends_where_the_cycle_says(ws):
    import cupy
    from kernels import memory as M
    ch = M.make_chase(ws)
    sink = cupy.full(1, 2**32 - 1, dtype=cupy.uint32)
    for hops in (1, ch.n_nodes - 1, ch.n_nodes, 3 * ch.n_nodes + 5):
        M.pointer_chase(ch, hops, sink)
        assert int(sink[0]) == ch.end_after(hops), (ws, hops)


@pytest.mark.parametrize("stride", [1, 2, 3, 8, 33])
def test_strided_copy(stride):
    from kernels import memory as M
    from utils.check import assert_close, poisoned
    from utils.arrays import random_normal
    n = 1000 + 37
    x, _ = random_normal(n * stride, "float32", seed=stride)
    y = poisoned((n,), np.float32)
    M.strided_copy(x, y, stride)
    assert_close(y, M.strided_reference(x, n, stride), dtype="exact")


@pytest.mark.parametrize("label", ["v0_float", "v1_float2", "v2_float4"])
def test_copy_width(label):
    from kernels import memory as M
    from utils.arrays import random_normal
    from utils.check import assert_close, poisoned
    n = 4 * (4096 + 37)
    x, seed = random_normal(n, "float32", seed=37)
    y = poisoned((n,), np.float32)
    M.COPY_WIDTH[label](x, y)
    assert_close(y, x, dtype="exact", name=f"{label} (seed {seed})")


@pytest.mark.parametrize("mode", ["row", "col", "col_padded", "col_swizzled", "row_vec4"])
def test_smem_read(mode):
    import cupy
    from kernels import memory as M
    from utils.check import assert_close, poisoned
    blocks, reps = 7, 5
    x = cupy.asarray(np.random.default_rng(7).integers(-8, 9, size=blocks * 1024).astype(np.float32))  # exact sums
    y = poisoned((blocks * M.BLOCK,), np.float32)
    M.smem_read(x, y, mode, reps)
    assert_close(y, M.smem_reference(x, mode, reps), dtype="exact", name=mode)
