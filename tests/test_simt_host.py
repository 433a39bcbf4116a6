"""Chapter 1 host side on a CPU: references, cost models, grids, occupancy, launcher validation."""

import numpy as np
import pytest

from kernels import simt


class FakeDeviceArray:
    """Just enough of a device array for launcher validation, without a GPU."""

    def __init__(self, shape, dtype, ptr=0x10000):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": self.dtype.str,
                                         "data": (ptr, False), "strides": None, "version": 3}


def f32(*shape, ptr=0x10000):
    return FakeDeviceArray(shape, np.float32, ptr)


# --- cost models ---------------------------------------------------------------------------------------

def test_cost_models():
    assert simt.vector_add_nbytes(2**28) == 12 * 2**28
    assert simt.vector_add_nbytes(10, itemsize=2) == 60
    src = simt.SOURCE.path.read_text()
    assert f"#define V3_PER_THREAD {simt.V3_PER_THREAD} " in src
    assert simt.vector_add_flops(7) == 7
    assert simt.branch_flops(100, 512) == 100 * 512 * 4 * 2
    assert simt.read_sum_nbytes(1000, 64) == 16_000 + 256
    assert simt.bytes_in_flight_per_sm(64, 1) == 64 * 32 * 16
    assert simt.bytes_in_flight_per_sm(8, 4, bytes_per_load=8) == 8 * 32 * 8 * 4
    # Little's law: 32 KiB per SM on 132 SMs at 1000 ns -> 4.3 GB/ms = 4325 GB/s
    assert simt.littles_law_gbps(32768, 132, 1000.0) == pytest.approx(4325.376)


# --- references ----------------------------------------------------------------------------------------

def simulate_branch(x, paths, iters, by_lane, threads=256):
    """The kernel's arithmetic, step by step, in float32 (c = 1)."""
    n = x.size
    y = np.full(n, np.nan, np.float32)
    for i in range(n):
        lane, warp = (i % threads) % 32, i // 32
        path = (lane if by_lane else warp) % paths
        for p in range(paths):
            if path != p:
                continue
            d = np.float32(p + 1)
            v = [np.float32(x[i] + q) for q in range(4)]
            for _ in range(iters):
                v = [np.float32(vq * np.float32(1.0) + d) for vq in v]
            y[i] = np.float32((v[0] + v[1]) + (v[2] + v[3]))
    return y


@pytest.mark.parametrize("by_lane", [True, False])
@pytest.mark.parametrize("paths", [1, 3, 32])
def test_branch_ref_matches_the_kernel_arithmetic(rng, by_lane, paths):
    x = rng.integers(-1000, 1001, size=300).astype(np.float32)
    got = simulate_branch(x, paths, 5, by_lane)
    ref = simt.branch_ref(x, paths, 5, by_lane)
    np.testing.assert_array_equal(got.astype(np.float64), ref)


def test_branch_values_stay_exact_in_fp32():
    # the largest chain value in the chapter's run: |x| <= 1000, d <= 32, iters = 512
    biggest = 1000 + 3 + 512 * 32
    assert 4 * biggest < 2**24


def simulate_read_sum(x4, T, ilp):
    """The read kernel's index walk: main loop of ILP loads, then single loads."""
    n4 = x4.shape[0]
    out = np.zeros(T)
    seen = np.zeros(n4, int)
    for t in range(T):
        acc = 0.0
        i = t
        while i + (ilp - 1) * T < n4:
            for j in range(ilp):
                acc += x4[i + j * T].sum()
                seen[i + j * T] += 1
            i += ilp * T
        while i < n4:
            acc += x4[i].sum()
            seen[i] += 1
            i += T
        out[t] = acc
    return out, seen


@pytest.mark.parametrize("n4,T,ilp", [(1, 64, 1), (37, 64, 2), (1003, 64, 4), (1003, 128, 8), (5000, 96, 8)])
def test_read_sum_ref_matches_the_index_walk(rng, n4, T, ilp):
    x4 = rng.standard_normal((n4, 4))
    out, seen = simulate_read_sum(x4, T, ilp)
    assert (seen == 1).all(), "every float4 is read exactly once"
    np.testing.assert_allclose(simt.read_sum_ref(x4.sum(axis=1), T), out, rtol=1e-12, atol=1e-12)


def test_expected_masks():
    m = simt.expected_masks(2)
    assert m[0] == 0x55555555 and m[1] == 0xAAAAAAAA
    assert (simt.expected_masks(1) == 0xFFFFFFFF).all()
    assert [int(v) for v in simt.expected_masks(32)[:3]] == [1, 2, 4]
    assert int(simt.expected_masks(4)[3]) == 0x88888888


# --- grids and occupancy ---------------------------------------------------------------------------------

def test_grids():
    assert simt.grid_one_per_thread(1) == 1
    assert simt.grid_one_per_thread(2**28) == 2**20
    assert simt.grid_one_per_thread(257) == 2
    assert simt.grid_stride_blocks(2**28, 132, 8) == 1056
    assert simt.grid_stride_blocks(37, 132, 8) == 1       # never more blocks than work
    assert simt.grid_stride_blocks(0, 132, 8) == 1
    with pytest.raises(ValueError, match="blocks_per_sm"):
        simt.grid_stride_blocks(100, 132, 0)
    assert simt.grid_tiles(1) == 1 and simt.grid_tiles(3) == 1
    assert simt.grid_tiles(2**28) == 2**26 // 512
    assert simt.grid_tiles(4 * 512 + 4) == 2


@pytest.mark.parametrize("regs,threads,blocks", [
    (12, 256, 8), (32, 256, 8), (33, 256, 6), (40, 256, 6), (62, 256, 4), (64, 256, 4),
    (22, 64, 32), (40, 128, 12), (128, 256, 2), (255, 256, 1),
])
def test_occupancy_estimate(regs, threads, blocks):
    assert simt.occupancy_estimate(regs, threads) == blocks


def test_read_config():
    assert simt.read_config(2) == (64, 1)
    assert simt.read_config(4) == (128, 1)
    assert simt.read_config(8) == (256, 1)
    assert simt.read_config(64) == (256, 8)
    for w in simt.READ_WARPS:
        t, b = simt.read_config(w)
        assert t * b == 32 * w and t <= simt.READ_MAX_THREADS
    with pytest.raises(ValueError):
        simt.read_config(12)


def test_read_kernels_fit_one_block_per_sm_and_cover_the_sweep():
    """Every ILP variant has registers for at least 32 warps per SM; ptxas batched its loads."""
    rep = simt.SOURCE.ptxas()
    for ilp in simt.READ_ILPS:
        regs = rep[simt.read_kernel(ilp)]["registers"]
        assert simt.occupancy_estimate(regs, 256) * 8 >= 32, (ilp, regs)
    for v in simt.VERSIONS.values():
        assert v.kernel in rep


# --- launcher validation ------------------------------------------------------------------------------------

@pytest.mark.parametrize("launch", [simt.launch_v0, simt.launch_v1, simt.launch_v2, simt.launch_v3])
def test_vector_add_launchers_reject_bad_arguments(launch):
    with pytest.raises(ValueError, match="expected a CUDA device array"):
        launch(np.zeros(4, np.float32), f32(4), f32(4))
    with pytest.raises(ValueError, match="expected dtype float32, got float64"):
        launch(FakeDeviceArray((4,), np.float64), f32(4), f32(4))
    with pytest.raises(ValueError, match=r"expected shape \(4\)"):
        launch(f32(4), f32(5), f32(4))
    with pytest.raises(ValueError, match="expected 1 dimensions"):
        launch(f32(2, 2), f32(2, 2), f32(2, 2))
    with pytest.raises(ValueError, match="multiple of 32"):
        launch(f32(4), f32(4), f32(4), threads=100)


@pytest.mark.parametrize("launch", [simt.launch_v2, simt.launch_v3])
def test_vector_versions_need_16_byte_alignment(launch):
    with pytest.raises(ValueError, match="16-byte aligned"):
        launch(f32(4, ptr=0x10004), f32(4), f32(4))
    with pytest.raises(ValueError, match="16-byte aligned"):
        launch(f32(4), f32(4), f32(4, ptr=0x10008))


def test_branch_launcher_rejects_bad_arguments():
    with pytest.raises(ValueError, match="by must be"):
        simt.launch_branch("block", f32(64), f32(64), paths=2, iters=1)
    with pytest.raises(ValueError, match="paths must be within"):
        simt.launch_branch("lane", f32(64), f32(64), paths=33, iters=1)
    with pytest.raises(ValueError, match="paths must be within"):
        simt.launch_branch("lane", f32(64), f32(64), paths=0, iters=1)
    with pytest.raises(ValueError, match="iters"):
        simt.launch_branch("warp", f32(64), f32(64), paths=2, iters=-1)
    with pytest.raises(ValueError, match=r"expected shape \(64\)"):
        simt.launch_branch("warp", f32(64), f32(65), paths=2, iters=1)
    with pytest.raises(ValueError, match="int32"):
        simt.launch_branch("warp", f32(2**31), f32(2**31), paths=2, iters=1)


def test_read_launcher_rejects_bad_arguments():
    ok = dict(ilp=1, threads=64, blocks=2)
    x4, out, smid = f32(100, 4), f32(128), FakeDeviceArray((2,), np.int32)
    with pytest.raises(ValueError, match="ilp must be one of"):
        simt.launch_read_sum(x4, out, smid, ilp=3, threads=64, blocks=2)
    with pytest.raises(ValueError, match="up to 256"):
        simt.launch_read_sum(x4, out, smid, ilp=1, threads=512, blocks=2)
    with pytest.raises(ValueError, match=r"expected shape \(\*, 4\)"):
        simt.launch_read_sum(f32(100, 3), out, smid, **ok)
    with pytest.raises(ValueError, match=r"expected shape \(128\)"):
        simt.launch_read_sum(x4, f32(64), smid, **ok)
    with pytest.raises(ValueError, match="expected dtype int32"):
        simt.launch_read_sum(x4, out, f32(2), **ok)
    with pytest.raises(ValueError, match="16-byte aligned"):
        simt.launch_read_sum(f32(100, 4, ptr=0x10008), out, smid, **ok)


def test_ptx_helpers():
    ptx = (".visible .entry k0(\n\t.param .u64 p\n)\n{\n\tld.global.nc.f32 \t%f1, [%rd1];\n"
           "\tadd.f32 %f2, %f1, %f1;\n\tst.global.f32 \t[%rd2], %f2;\n\tret;\n}\n"
           ".visible .entry k1(\n)\n{\n\tld.global.nc.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd1];\n}\n")
    assert simt.ptx_memory_ops(ptx, "k0") == ["ld.global.nc.f32", "st.global.f32"]
    assert simt.ptx_memory_ops(ptx, "k1") == ["ld.global.nc.v4.f32"]
    with pytest.raises(KeyError):
        simt.ptx_entry(ptx, "k2")


