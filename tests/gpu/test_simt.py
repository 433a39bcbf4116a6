"""Chapter 1 kernels on a GPU: every version and experiment kernel on fresh random inputs,
awkward sizes, outputs poisoned before the run."""
import numpy as np
import pytest

from kernels import simt
from utils.check import assert_close, poisoned

pytestmark = pytest.mark.gpu

SIZES = [1, 2, 3, 4, 5, 37, 199, 1000 + 3, 2**20 + 3]
SEED = 20261201


def random_inputs(n, seed):
    from utils.arrays import random_normal
    a, _ = random_normal(n, "float32", seed=seed)
    b, _ = random_normal(n, "float32", seed=seed + 1)
    return a, b


@pytest.mark.parametrize("label", list(simt.VECTOR_ADD))
@pytest.mark.parametrize("n", SIZES)
def test_vector_add_versions(label, n):
    seed = SEED + n
    a, b = random_inputs(n, seed)
    c = poisoned(n, np.float32)
    simt.VECTOR_ADD[label](a, b, c)
    assert_close(c, simt.vector_add_ref(a, b), dtype="exact", name=f"{label} n={n} (seed {seed})")


@pytest.mark.parametrize("label", ["v1_grid_stride", "v2_float4"])
@pytest.mark.parametrize("blocks", [1, 3, 132 * 32])
def test_grid_stride_any_grid(label, blocks):
    n = 3 * 2**18 + 7                    # several grid strides for a small grid, a tail for v2
    a, b = random_inputs(n, SEED)
    c = poisoned(n, np.float32)
    simt.VECTOR_ADD[label](a, b, c, config=simt.VectorAddConfig(threads=256, blocks=blocks))
    assert_close(c, a + b, dtype="exact", name=f"{label} blocks={blocks} (seed {SEED})")


@pytest.mark.parametrize("name", ["vector_add_v0_one_per_thread", "vector_add_v1_grid_stride",
                                  "vector_add_v2_float4", "vector_add_v3_float4_tile",
                                  *[simt.read_kernel(i) for i in simt.READ_ILPS]])
@pytest.mark.parametrize("threads", [64, 128, 256])
def test_occupancy_formula_agrees_with_the_driver(name, threads):
    from utils.occupancy import from_function
    from utils.version import driver_blocks_per_sm
    fn = simt.SOURCE.function(name)
    assert simt.kernel_resources(name)["local_bytes"] == 0, name
    assert from_function(fn, threads).blocks == driver_blocks_per_sm(fn, threads), (name, threads)


@pytest.mark.parametrize("by", ["lane", "warp"])
@pytest.mark.parametrize("paths", [1, 2, 5, 32])
@pytest.mark.parametrize("n", [1, 37, 1000 + 3, 3 * 256 * 7])
def test_branch_kernels(by, paths, n):
    x = simt.integer_valued(n, seed=SEED + n)
    y = poisoned(n, np.float32)
    simt.launch_branch(by, x, y, paths=paths, iters=9)
    assert_close(y, simt.branch_ref(x, paths, 9, by == "lane"), dtype="exact", name=f"branch_by_{by}")


def test_active_masks_show_one_branch_per_residue():
    for paths in (1, 2, 4, 32):
        m = simt.active_masks(paths)
        # each lane sees itself in its mask and no lane of another branch
        lanes = np.arange(32)
        assert all((int(m[l]) >> l) & 1 for l in lanes)
        assert all(int(m[l]) & ~int(simt.expected_masks(paths)[l]) == 0 for l in lanes)


@pytest.mark.parametrize("ilp", simt.READ_ILPS)
@pytest.mark.parametrize("n4,threads,blocks", [(1, 64, 1), (37, 64, 2), (1000 + 3, 128, 3),
                                               (2**16 + 5, 256, 4)])
def test_read_sum(ilp, n4, threads, blocks):
    import cupy

    from utils.arrays import random_normal
    x4, seed = random_normal((n4, 4), "float32", seed=SEED + n4)
    out = poisoned(blocks * threads, np.float32)
    smid = cupy.full(blocks, -1, dtype=cupy.int32)
    simt.launch_read_sum(x4, out, smid, ilp=ilp, threads=threads, blocks=blocks)
    ref = simt.read_sum_ref(x4.astype(cupy.float64).sum(axis=1), blocks * threads)
    assert_close(out, ref, dtype="float32", name=f"read_sum_ilp{ilp} (seed {seed})")
    assert int(smid.min()) >= 0


@pytest.mark.parametrize("label", list(simt.VECTOR_ADD))
def test_the_chapter_ladder_checks_each_version(label):
    """What chapter 1's va.run does first: every odd size, fresh seeded inputs, poisoned outputs."""
    assert simt.ladder(None).check(label) == len(simt.ODD_SIZES)


def test_branch_sweep_records_and_checks(tmp_path):
    from utils.gpu import gpu_slug
    from utils.record import Record
    rec = Record("test-branch", gpu=gpu_slug(), root=tmp_path)
    t = simt.branch_sweep(rec, 4096 + 37, paths=(1, 2, 32), iters=16)
    assert t["lane"].shape == (3,) and len(rec.find("branch")) == 6
