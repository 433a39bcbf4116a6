"""Chapter 4 host side on a CPU: cost models, launch geometry, launcher validation, and the index maps
of the kernels (bank conflicts, swizzles, micro-tile placement) checked by simulating them in NumPy."""
import numpy as np
import pytest

from kernels import memory as M
from kernels import transpose as T
from tests.fakes import FakeDeviceArray

# --- transpose -------------------------------------------------------------------------------------

def test_cost_model_counts_read_plus_write():
    assert T.nbytes(8192, 8192) == 2 * 4 * 8192 * 8192
    assert T.nbytes(3, 5, itemsize=2) == 60


def test_reference_is_a_contiguous_transpose():
    x = np.random.default_rng(5).standard_normal((5, 3)).astype(np.float32)
    r = T.reference(x)
    assert r.flags.c_contiguous and r.shape == (3, 5) and np.array_equal(r, x.T)


@pytest.mark.parametrize("label", list(T.VERSIONS))
@pytest.mark.parametrize("rows,cols", [(1823, 781), (1, 37), (199, 1), (8192, 8192)])
def test_plan_covers_every_element(label, rows, cols):
    v = T.VERSIONS[label]
    (ln,) = v.launches(T.VERSIONS.problem(FakeDeviceArray((rows, cols), np.float32),
                                          FakeDeviceArray((cols, rows), np.float32, ptr=0x20000)))
    (gx, gy, gz), (bx, by, bz) = ln.grid, ln.block
    assert ln.kernel == v.name and (bx, by, bz) == (32, 8, 1) and gz == 1
    assert (int(ln.args[2]), int(ln.args[3])) == (rows, cols)
    if v.name == "transpose_v0_naive":
        assert gx * 32 >= cols and gy * 8 >= rows
    elif v.name == "transpose_v1_naive_colread":
        assert gx * 32 >= rows and gy * 8 >= cols
    elif v.name in ("transpose_v5_vec4", "transpose_v6_vec4_stream"):
        assert gx * 128 >= cols and gy * 32 >= rows
    elif v.name == "transpose_v7_vec4_colmajor":
        assert gx * 32 >= rows and gy * 128 >= cols
    elif v.name == "transpose_v8_vec4_tile64":
        assert gx * 64 >= rows and gy * 128 >= cols
    else:
        assert gx * 32 >= cols and gy * 32 >= rows
    # no block is wasted: one block fewer in x or y would leave elements uncovered
    tile = {"transpose_v0_naive": (32, 8), "transpose_v1_naive_colread": (32, 8)}.get(v.name)
    if tile:
        along_x, along_y = (cols, rows) if v.name == "transpose_v0_naive" else (rows, cols)
        assert (gx - 1) * tile[0] < along_x and (gy - 1) * tile[1] < along_y


def test_versions_are_numbered_in_order_and_have_their_own_snippet():
    from utils.show import snippets
    names = snippets(T.SOURCE.path.read_text())
    assert [v.number for v in T.VERSIONS.values()] == list(range(len(T.VERSIONS)))
    for v in T.VERSIONS.values():
        assert v.snippet in names, v.name
        assert v.name + "(" in T.SOURCE.path.read_text(), v.name
    assert T.BEST in T.VERSIONS


@pytest.mark.parametrize("x,out,msg", [
    (np.zeros((4, 4), np.float32), FakeDeviceArray((4, 4), np.float32), "expected a CUDA device array"),
    (FakeDeviceArray((4, 4), np.float64), FakeDeviceArray((4, 4), np.float32), "expected dtype float32"),
    (FakeDeviceArray((16,), np.float32), FakeDeviceArray((16,), np.float32), "expected 2 dimensions"),
    (FakeDeviceArray((0, 4), np.float32), FakeDeviceArray((4, 0), np.float32), "at least one row"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((4, 6), np.float32), r"expected shape \(6, 4\)"),
    (FakeDeviceArray((4, 6), np.float32, strides=(4, 16)), FakeDeviceArray((6, 4), np.float32), "C-contiguous"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((6, 4), np.float32, ptr=0x10004), "aligned"),
])
def test_problem_rejects_bad_arguments(x, out, msg):
    with pytest.raises(ValueError, match=msg):
        T.VERSIONS.problem(x, out)


@pytest.mark.parametrize("label", list(T.VERSIONS))
def test_grid_y_limit_is_checked(label):
    rows = 32 * 65536 + 1       # 65537 tiles of 32 rows, more than grid y takes
    p = T.VERSIONS.problem(FakeDeviceArray((rows, 1), np.float32), FakeDeviceArray((1, rows), np.float32))
    if label in ("v0_naive", "v2_smem", "v3_smem_padded", "v4_smem_swizzled", "v5_vec4", "v6_vec4_stream"):
        assert "grid y" in T.VERSIONS[label].why_not(p)
    else:   # rows run along grid x in v1, v7 and v8
        assert T.VERSIONS[label].supports(p)


# --- memory microbenchmarks ------------------------------------------------------------------------

def test_chase_is_one_cycle_through_every_line():
    ch = M.make_chase(64 * M.LINE_BYTES, xp=np)
    seen, j = [], ch.start
    for _ in range(ch.n_nodes):
        assert j % M.NODE_STRIDE == 0
        seen.append(j)
        j = int(ch.next[j])
    assert j == ch.start and len(set(seen)) == ch.n_nodes
    assert ch.end_after(5) == seen[5] and ch.end_after(ch.n_nodes + 2) == seen[2]


def test_chase_rejects_bad_sizes():
    with pytest.raises(ValueError, match="multiple of 128"):
        M.make_chase(1000, xp=np)


def test_chase_plan():
    l2 = 60 << 20
    hops, flush = M.chase_plan(16 << 10, l2)
    assert not flush and hops % (16 << 10 >> 7) == 0 and hops >= 1 << 17
    hops, flush = M.chase_plan(24 << 20, l2)
    assert not flush and hops == (24 << 20) // 128
    hops, flush = M.chase_plan(48 << 20, l2)
    assert not flush and hops == (48 << 20) // 128
    hops, flush = M.chase_plan(1 << 30, l2)
    assert flush and hops < (1 << 30) // 128


def test_strided_model():
    assert M.strided_model(1) == 1.0
    assert M.strided_model(2) == pytest.approx(2 / 3)
    assert M.strided_model(8) == M.strided_model(64) == pytest.approx(2 / 9)
    assert M.strided_model(16, sector_bytes=64) == pytest.approx(2 / 17)


@pytest.mark.parametrize("mode,ways", [("row", 1), ("col", 32), ("col_padded", 1), ("col_swizzled", 1)])
def test_smem_bank_model(mode, ways):
    assert all(M.conflict_ways(M.smem_banks(mode, col=c)) == ways for c in range(32))


def test_smem_reference_on_cpu():
    x = np.random.default_rng(129).integers(-8, 9, size=2 * 1024).astype(np.float32)
    ref = M.smem_reference(x, "col", 3, xp=np)
    assert ref.shape == (2 * M.BLOCK,)
    assert ref[0] == 3 * x[:32].sum() and ref[32] == ref[0]          # warp 1, lane 0: row 0 again
    assert ref[M.BLOCK + 1] == 3 * x[1024 + 32:1024 + 64].sum()      # block 1, lane 1: row 1
    row = M.smem_reference(x, "row", 1, xp=np)
    assert row[1] == x[:1024].reshape(32, 32)[:, 1].sum()


@pytest.mark.parametrize("fn,args,msg", [
    (M.strided_copy, (FakeDeviceArray((10,), np.float32), FakeDeviceArray((4,), np.float32), 4), "needs 13"),
    (M.strided_copy, (FakeDeviceArray((10,), np.float32), FakeDeviceArray((4,), np.float32), 0), "stride"),
    (M.COPY_WIDTH.problem, (FakeDeviceArray((8,), np.float32), FakeDeviceArray((4,), np.float32)), r"shape \(8\)"),
    (M.COPY_WIDTH.problem, (FakeDeviceArray((0,), np.float32), FakeDeviceArray((0,), np.float32)), "at least one"),
    (M.smem_read, (FakeDeviceArray((1000,), np.float32), FakeDeviceArray((256,), np.float32), "col", 1), "multiple of 1024"),
    (M.smem_read, (FakeDeviceArray((2048,), np.float32), FakeDeviceArray((256,), np.float32), "col", 1), "512 floats"),
    (M.smem_read, (FakeDeviceArray((1024,), np.float32), FakeDeviceArray((256,), np.float32), "diag", 1), "mode"),
])
def test_memory_launchers_reject_bad_arguments(fn, args, msg):
    with pytest.raises(ValueError, match=msg):
        fn(*args)


@pytest.mark.parametrize("label", list(M.COPY_WIDTH))
def test_copy_width_plans(label):
    v = M.COPY_WIDTH[label]
    width = M.COPY_WIDTHS[label]
    p = M.COPY_WIDTH.problem(FakeDeviceArray((4 * 1000,), np.float32), FakeDeviceArray((4 * 1000,), np.float32))
    (ln,) = v.launches(p)
    assert ln.kernel == v.name and ln.block == (M.BLOCK, 1, 1)
    assert int(ln.args[2]) == 4000 // width and ln.grid[0] == -(-(4000 // width) // M.BLOCK)
    odd = M.COPY_WIDTH.problem(FakeDeviceArray((6,), np.float32), FakeDeviceArray((6,), np.float32))
    assert v.supports(odd) == (6 % width == 0)
    if width == 4:
        assert "multiple of the vector width" in v.why_not(odd)


def test_l2_fall_reads_a_sweep():
    def e(mib, gbps):
        return {"working_set_mib": mib, "metric": gbps}
    sweep = [e(4, 9600), e(20, 9000), e(28, 9100), e(44, 8000), e(60, 8300), e(72, 7300), e(256, 5000)]
    f = M.l2_fall(sweep, 60 << 20)
    assert f.plateau_gbps == 9100 and f.first_beyond_mib == 72 and f.lowest_within_mib == 44
    assert f.lowest_within == pytest.approx(8000 / 9100) and f.first_beyond == pytest.approx(7300 / 9100)
    with pytest.raises(ValueError, match="beyond"):
        M.l2_fall(sweep[:5], 60 << 20)


def test_the_chapter_ladder_and_its_cases():
    from tests.test_version_ladder import FakeRecord
    lad = T.ladder(FakeRecord())
    assert lad.registry is T.VERSIONS and lad.shapes == [T.CHAPTER_SHAPE] and lad.tol == {"float32": 0.0}
    assert lad.odd_shapes == [tuple(s) for s in T.ODD_SHAPES] and "cupy.ascontiguousarray" in lad.peers
    case = T.make_case((3, 5), np.float32, np.random.default_rng(0), xp=np)
    x, out = case.args
    assert x.shape == (3, 5) and out.shape == (5, 3) and case.out is out
    assert np.array_equal(lad.reference(case), x.T)


def test_chase_readings():
    import matplotlib
    matplotlib.use("Agg")
    ns = {16 << 10: 20.0, 64 << 10: 22.0, 512 << 10: 140.0, 4 << 20: 150.0, 24 << 20: 145.0, 48 << 20: 260.0,
          256 << 20: 330.0, 1 << 30: 350.0}
    p = M.chase_plateaus(ns)
    assert p == {"L1": 21.0, "L2": 145.0, "HBM": 340.0}
    assert M.human_bytes(48 << 20) == "48 MiB" and M.human_bytes(1 << 30) == "1 GiB" and M.human_bytes(100) == "100 B"
    assert M.plot_chase(ns, 60 << 20).axes
    with pytest.raises(ValueError, match="between"):
        M.chase_plateaus({16 << 10: 20.0})


def test_peer_table():
    entries = [{"impl": "cupy.ascontiguousarray", "ms": 0.457, "metric": 1174.0},
               {"impl": "torch.t().contiguous()", "ms": 0.466, "metric": 1152.0}]
    t = T.peer_table(entries, 4245.0, 0.30)
    assert t.rows[0] == ["cupy.ascontiguousarray", "457", "1174", "27.7%", "30%"] and len(t.rows) == 2
