"""utils.version and utils.ladder on a GPU: binding plans, workspaces, persistent grids, and a ladder that
catches a version which leaves an element unwritten."""
import dataclasses

import numpy as np
import pytest

from utils.build import KernelSource
from utils.check import CheckFailed
from utils.ladder import Case, Ladder
from utils.version import Launch, Registry, Unsupported, Version, Workspace

pytestmark = pytest.mark.gpu

SOURCE = KernelSource("../tests/gpu/samples/axpy.cu")
A = np.float32(1.5)


@dataclasses.dataclass
class Problem:
    x: object
    y: object
    out: object
    n: int


def problem(x, y, z):
    if not x.shape == y.shape == z.shape or x.ndim != 1:
        raise ValueError(f"x, y, z: expected equal 1-D shapes, got {x.shape}, {y.shape}, {z.shape}")
    return Problem(x, y, z, int(x.shape[0]))


def blocks(n, threads=256):
    return (-(-n // threads), 1, 1)


def plan_thread(p, cfg):
    return [Launch("axpy_v0_thread", blocks(p.n), (256, 1, 1), (p.x, p.y, p.out, A, np.int32(p.n)))]


def plan_stride(p, cfg):
    if p.n > 1 << 24:
        raise Unsupported("at most 2^24 elements")
    return [Launch("axpy_v1_grid_stride", blocks(p.n, 32), (256, 1, 1), (p.x, p.y, p.out, A, np.int32(p.n)),
                   persistent=True)]


def plan_broken(p, cfg):
    return [Launch("axpy_v2_off_by_one", blocks(p.n), (256, 1, 1), (p.x, p.y, p.out, A, np.int32(p.n)))]


def plan_staged(p, cfg):
    return [Launch("axpy_v3_staged", blocks(p.n), (256, 1, 1), (p.x, Workspace((p.n,)), p.y, p.out, A, np.int32(p.n)))]


VERSIONS = Registry("axpy", problem, [
    Version("axpy_v0_thread", "one thread per element", SOURCE, plan_thread),
    Version("axpy_v1_grid_stride", "grid-stride loop, one resident wave", SOURCE, plan_stride, parent="v0_thread"),
    Version("axpy_v2_off_by_one", "broken on purpose", SOURCE, plan_broken, parent="v0_thread"),
    Version("axpy_v3_staged", "through a workspace", SOURCE, plan_staged, parent="v0_thread"),
])


def make(shape, dtype, rng):
    import cupy
    x, y = (cupy.asarray(rng.standard_normal(shape).astype(np.float32)) for _ in range(2))
    return Case((x, y, cupy.empty_like(x)), outputs=(2,))


def reference(case):
    x, y, _ = (a.get().astype(np.float64) for a in case.args)
    return A * x + y


def ladder(tmp_path):
    from utils.record import Record
    rec = Record("00-test", gpu="test", root=tmp_path)
    return Ladder(rec, VERSIONS, shapes=[(1 << 20,)], dtypes=["float32"], odd_shapes=[(1,), (37,), (1823 * 781,)],
                  make=make, reference=reference, nbytes=lambda s, d: 12 * s[0], ceiling=None, seed=7,
                  bench=dict(target_ms=5, max_reps=5, warmup=1))


def test_bound_version_launches_and_returns_its_output():
    import cupy
    x = cupy.arange(1000, dtype=cupy.float32)
    y = cupy.ones(1000, dtype=cupy.float32)
    z = cupy.full(1000, cupy.nan, dtype=cupy.float32)
    out = VERSIONS["v1_grid_stride"](x, y, z)
    assert out is z
    assert cupy.allclose(z, 1.5 * cupy.arange(1000, dtype=cupy.float32) + 1)


@pytest.mark.parametrize("label", ["v0_thread", "v1_grid_stride", "v3_staged"])
def test_ladder_checks_and_times_good_versions(tmp_path, label):
    lad = ladder(tmp_path)
    assert lad.check(label) == 3
    (e,) = lad.time(label)
    assert e["impl"] == label and e["metric_name"] == "GB/s" and e["ms"] > 0


def test_ladder_catches_an_unwritten_element(tmp_path):
    with pytest.raises(CheckFailed, match=r"axpy_v2_off_by_one float32 \d+ \(seed \d+\): 1 of \d+ elements are NaN"):
        ladder(tmp_path).check("v2_off_by_one")


def test_persistent_grid_is_lowered_to_one_wave():
    import cupy

    import utils
    from utils.version import bind_launches, driver_blocks_per_sm, resident_grid
    n = 1 << 22
    x, y, z = cupy.ones(n, cupy.float32), cupy.zeros(n, cupy.float32), cupy.zeros(n, cupy.float32)
    (ln,) = plan_stride(problem(x, y, z), None)
    fn = SOURCE.launchable(ln.kernel)
    per_sm = driver_blocks_per_sm(fn, 256)
    assert per_sm and per_sm >= 1
    assert resident_grid(fn, ln)[0] == min(ln.grid[0], per_sm * utils.device_summary()["sms"]) < ln.grid[0]
    bind_launches([ln], SOURCE)()
    assert float(z.sum()) == 1.5 * n
