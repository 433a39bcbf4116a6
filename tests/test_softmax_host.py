"""Chapter 6 host side on a CPU: the (m, l) algebra, the dispatcher and geometry, the work split of the
register versions (every element held by exactly one thread), and the launchers' ValueErrors."""
import numpy as np
import pytest

from kernels import softmax as S
from tests.test_build_show_ops import FakeDeviceArray

BF16 = S.BF16
DTYPES = [np.float32] + ([BF16] if BF16 is not None else [])
TARGETS = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]


def test_cost_model():
    assert S.nbytes(8192, 1024) == 2 * 4 * 8192 * 1024
    assert S.nbytes(3, 5, itemsize=2) == 60
    assert S.traffic("v0_three_pass", 2, 3) == 4 * 4 * 6
    assert S.traffic("v1_online", 2, 3) == 3 * 4 * 6
    assert S.traffic("v2_warp_row", 2, 3) == S.nbytes(2, 3)


def test_reference_matches_the_definition(rng):
    x = rng.standard_normal((7, 33)).astype(np.float32)
    e = np.exp(x.astype(np.float64))
    assert np.allclose(S.reference(x), e / e.sum(-1, keepdims=True), rtol=1e-12)
    big = np.array([[1e4, 1e4 - 1, -1e4]], np.float32)
    y = S.reference(big)
    assert np.all(np.isfinite(y)) and y[0, 0] == pytest.approx(1 / (1 + np.exp(-1)))
    masked = np.array([[-np.inf] * 4, [0.0, -np.inf, 0.0, -np.inf]], np.float32)
    y = S.reference(masked)
    assert np.all(np.isnan(y[0])) and np.array_equal(y[1], [0.5, 0.0, 0.5, 0.0])


def test_merge_is_commutative_associative_with_identity(rng):
    x = rng.standard_normal((5, 90)) * 30
    a, b, c = S.state(x[:, :20]), S.state(x[:, 20:50]), S.state(x[:, 50:])
    ab, ba = S.merge(a, b), S.merge(b, a)
    assert np.array_equal(ab[0], ba[0]) and np.array_equal(ab[1], ba[1])
    left, right = S.merge(S.merge(a, b), c), S.merge(a, S.merge(b, c))
    whole = S.state(x)
    for s in (left, right):
        assert np.array_equal(s[0], whole[0]) and np.allclose(s[1], whole[1], rtol=1e-13)
    empty = (np.full(5, -np.inf), np.zeros(5))
    e = S.merge(a, empty)
    assert np.array_equal(e[0], a[0]) and np.array_equal(e[1], a[1])
    ee = S.merge(empty, empty)
    assert np.all(np.isneginf(ee[0])) and np.all(ee[1] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols", TARGETS)
def test_plan_picks_the_one_read_version_that_fits(rows, cols, dtype):
    v = S.plan(rows, cols, dtype)
    fp32 = np.dtype(dtype) == np.float32
    expected = {1024: "v2_warp_row" if fp32 else "v8_warp_stream", 4096: "v5_block_raw",
                16384: "v3_block_row" if fp32 else "v5_block_raw",
                65536: "v10_cluster_once", 262144: "v10_cluster_once"}[cols]
    assert v == expected
    # the raw versions' default instances are the tuning runs' winners at these widths
    winners = {("float32", 4096): (4, 256), ("bfloat16", 1024): (4, 4, 4, 4), ("bfloat16", 4096): (8, 64),
               ("bfloat16", 16384): (8, 256), ("float32", 65536): (16, 128, 8),
               ("float32", 262144): (16, 512, 8), ("bfloat16", 65536): (8, 256, 4),
               ("bfloat16", 262144): (8, 256, 16)}
    if (np.dtype(dtype).name, cols) in winners:
        assert S.raw_config(v, cols, dtype) == winners[np.dtype(dtype).name, cols]
    (ln,) = S.geometry(v, rows, cols, dtype)
    assert ln.kernel in S.name_expressions()
    threads = ln.block[0]
    assert threads % 32 == 0 and threads <= 1024


def test_plan_falls_back_to_two_reads_beyond_a_cluster():
    assert S.plan(4, 262145, np.float32) == "v1_online"
    assert S.plan(4, 1, np.float32) == "v2_warp_row"
    # v10 (like v6) puts rows on grid y (at most 65535): more rows than that go to v1, which the launcher accepts
    assert S.plan(S.MAX_GRID_Y, 20000, np.float32) == "v10_cluster_once"
    assert S.plan(S.MAX_GRID_Y + 1, 20000, np.float32) == "v1_online"
    x = FakeDeviceArray((70000, 20000), np.float32)
    (ln,) = S._validate(x, FakeDeviceArray((70000, 20000), np.float32), S.plan(70000, 20000, np.float32))[2]
    assert ln.grid == (70000, 1, 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 7, 33, 1000, 1024, 1025, 2048, 4097, 16384, 16385, 65536, 131073, 262144])
def test_every_geometry_is_an_instantiated_template(cols, dtype):
    for label in S.VERSIONS:
        if not S.supports(label, cols, dtype):
            with pytest.raises(ValueError, match="at most"):
                S.geometry(label, 3, cols, dtype)
            continue
        for ln in S.geometry(label, 3, cols, dtype):
            assert ln.kernel in S.name_expressions(), ln.kernel
            if label in S.CLUSTER_ROW_VERSIONS:
                cl = int(ln.kernel.rstrip(">").split(",")[-1])
                assert ln.grid == (cl, 3, 1)           # grid x divisible by the cluster size
                assert S.cluster_size(ln) == cl


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 7, 33, 1000, 1024, 2048, 4097, 16384, 20000, 65536, 262144])
def test_register_versions_hold_every_element_exactly_once(cols, dtype):
    for label in ("v2_warp_row", "v3_block_row", "v4_cluster_row", "v5_block_raw", "v6_cluster_raw",
                  "v7_warp_raw", "v8_warp_stream", "v9_stream", "v10_cluster_once", "v11_early_arrive"):
        if not S.supports(label, cols, dtype):
            continue
        idx = S.thread_elements(label, cols, dtype)
        held = idx[idx >= 0]
        assert np.array_equal(np.sort(held), np.arange(cols)), f"{label} cols={cols}"
        # chunk-aligned vector accesses: each thread's elements come in runs of VEC from c * VEC
        v = S.vec(dtype)
        first = idx.reshape(idx.shape[0], -1, v)[..., 0]
        assert np.all((first[first >= 0] % v) == 0)


def test_v2_warp_accesses_are_contiguous_per_instruction():
    # load j of a warp: lanes 0..31 read chunks 32 j + lane: 512 contiguous bytes
    idx = S.thread_elements("v2_warp_row", 1024, np.float32)           # [32, 32]
    for j in range(idx.shape[1] // 4):
        starts = idx[:, 4 * j]
        assert np.array_equal(np.diff(starts), np.full(31, 4))


@pytest.mark.parametrize("label", ["v2_warp_row", "v3_block_row", "v4_cluster_row", "v5_block_raw",
                                   "v6_cluster_raw", "v7_warp_raw", "v8_warp_stream", "v9_stream"])
@pytest.mark.parametrize("shape", [(3, 7), (2, 33), (2, 1000), (1, 1), (2, 4097)])
def test_simulated_algorithm_matches_the_reference(label, shape, rng):
    if not S.supports(label, shape[1], np.float32):
        pytest.skip("row too long for this version")
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    assert np.allclose(S.simulate(label, x), S.reference(x), rtol=1e-12, atol=1e-300)


def test_simulated_algorithm_on_masked_rows_and_large_logits():
    x = np.zeros((3, 70), np.float32)
    x[0] = -np.inf                                       # fully masked: NaN, as torch
    x[1, :] = -np.inf
    x[1, 65] = 2.0                                       # one survivor, held by a late thread
    x[2] = np.linspace(-1e4, 1e4, 70).astype(np.float32)   # large logits
    for label in ("v2_warp_row", "v3_block_row", "v4_cluster_row", "v5_block_raw", "v6_cluster_raw",
                  "v7_warp_raw", "v8_warp_stream", "v9_stream"):
        y = S.simulate(label, x)
        assert np.all(np.isnan(y[0]))
        assert y[1, 65] == 1.0 and np.all(np.delete(y[1], 65) == 0)
        assert np.allclose(y[2], S.reference(x)[2], rtol=1e-12, atol=0)


def test_versions_are_numbered_in_order_and_named_after_their_kernels():
    labels = list(S.VERSIONS)
    assert [int(lbl.split("_")[0][1:]) for lbl in labels] == list(range(len(labels)))
    for lbl, v in S.VERSIONS.items():
        assert v.kernel == "softmax_" + lbl
        assert all(ln.kernel.startswith(v.kernel) for ln in S.geometry(lbl, 2, 8, np.float32))


def test_every_version_has_a_snippet():
    from utils.show import snippets
    names = snippets(S.SOURCE.path.read_text())
    for lbl in S.VERSIONS:
        assert lbl.split("_")[0].replace("v", "softmax_v") in names
    assert {"softmax_chunks", "softmax_registers"} <= set(names)


def test_launch_constants_match_the_source():
    src = S.SOURCE.path.read_text()
    for name in ("V0_THREADS", "V1_THREADS", "V2_ROWS", "V4_THREADS"):
        assert f"constexpr int {name} = {getattr(S, name)};" in src


@pytest.mark.parametrize("x,y,msg", [
    (np.zeros((4, 4), np.float32), FakeDeviceArray((4, 4), np.float32), "expected a CUDA device array"),
    (FakeDeviceArray((4, 4), np.float64), FakeDeviceArray((4, 4), np.float64), "expected dtype float32"),
    (FakeDeviceArray((16,), np.float32), FakeDeviceArray((16,), np.float32), "expected 2 dimensions"),
    (FakeDeviceArray((0, 4), np.float32), FakeDeviceArray((0, 4), np.float32), "at least one row"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((6, 4), np.float32), r"expected shape \(4, 6\)"),
    (FakeDeviceArray((4, 8), np.float32), FakeDeviceArray((4, 8), np.float16), "expected dtype float32"),
    (FakeDeviceArray((4, 6), np.float32, strides=(4, 16)), FakeDeviceArray((4, 6), np.float32), "C-contiguous"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((4, 6), np.float32, ptr=0x10004), "aligned"),
])
def test_launchers_reject_bad_arguments(x, y, msg):
    for v in S.VERSIONS.values():
        with pytest.raises(ValueError, match=msg):
            v.launch(x, y)


def test_launchers_reject_rows_too_long_or_too_many():
    x = FakeDeviceArray((2, 4096), np.float32)
    with pytest.raises(ValueError, match="at most 1024"):
        S.VERSIONS["v2_warp_row"].launch(x, FakeDeviceArray((2, 4096), np.float32))
    x = FakeDeviceArray((70000, 20000), np.float32)
    with pytest.raises(ValueError, match="grid y"):
        S.VERSIONS["v4_cluster_row"].launch(x, FakeDeviceArray((70000, 20000), np.float32))
    x = FakeDeviceArray((2**16, 2**15), np.float32)
    with pytest.raises(ValueError, match="2\\*\\*31"):
        S.VERSIONS["v1_online"].launch(x, FakeDeviceArray((2**16, 2**15), np.float32))


def test_bind_validates_like_the_launchers():
    x = FakeDeviceArray((4, 6), np.float32)
    with pytest.raises(ValueError, match=r"expected shape \(4, 6\)"):
        S.bind("v1_online", x, FakeDeviceArray((6, 4), np.float32))
    with pytest.raises(ValueError, match="at most 1024"):
        S.bind("v2_warp_row", FakeDeviceArray((2, 4096), np.float32), FakeDeviceArray((2, 4096), np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_raw_config_is_instantiated_and_holds_its_rows(dtype):
    names = S.name_expressions()
    for version, (table, _) in S.RAW_TABLES.items():
        caps = [S.capacity(version, dtype, c) for c in table[np.dtype(dtype).name]]
        assert caps == sorted(caps), f"{version} defaults must grow in capacity"
        for cfg in S.raw_configs(version, dtype):
            cap = S.capacity(version, dtype, cfg)
            for cols in (1, cap - 1, cap):
                (ln,) = S.geometry(version, 3, cols, dtype, cfg)
                assert ln.kernel in names
                if version in S.CLUSTER_ROW_VERSIONS:
                    assert ln.grid == (cfg[2], 3, 1) and ln.block == (cfg[1], 1, 1)
                    assert S.cluster_size(ln) == cfg[2]
                elif version in ("v7_warp_raw", "v8_warp_stream"):
                    assert ln.block == (32 * cfg[1], 1, 1) and ln.grid == (1, 1, 1)
                    assert S.cluster_size(ln) == 1
                elif version == "v9_stream":          # 3 rows: one cluster per row, at most
                    assert ln.grid == (3 * cfg[2], 1, 1) and ln.block == (cfg[1], 1, 1)
                    assert S.cluster_size(ln) == cfg[2] and ln.smem == 2 * 16 * cfg[0] * cfg[1]
                else:
                    assert ln.block == (cfg[1], 1, 1)
            with pytest.raises(ValueError, match="holds at most"):
                S.geometry(version, 3, cap + 1, dtype, cfg)
    with pytest.raises(ValueError, match="not instantiated"):
        S.geometry("v5_block_raw", 3, 100, dtype, (3, 96))
    with pytest.raises(ValueError, match="takes no config"):
        S.geometry("v3_block_row", 3, 100, dtype, (4, 256))


def test_raw_registers_fit_the_occupancy_they_are_tuned_for():
    # v7 bf16 (4, 8, 8) must fit 8 blocks of 256 threads (64 rows per SM: all of 8192 x 1024 at once); the
    # 128-thread v6 blocks of 16 chunks 5 blocks (160 KiB of row per SM); the 16-block clusters 2; v8 the
    # blocks per SM its grid was sized for (one wave on 132 SMs)
    from kernels.simt import occupancy_estimate
    from utils.build import compile_source
    comp = compile_source(S.SOURCE)

    def resident(version, dtype, cfg, cols):
        (ln,) = S.geometry(version, 8192, cols, dtype, cfg)
        blocks = occupancy_estimate(comp.report[comp.symbols[ln.kernel]]["registers"], ln.block[0])
        return blocks, blocks * S.block_row_bytes(ln, cols, dtype)

    assert resident("v7_warp_raw", BF16, (4, 8, 8), 1024) == (8, 8 * 8 * 2048)
    assert resident("v6_cluster_raw", np.float32, (16, 128, 8), 65536) == (5, 160 * 1024)
    assert resident("v6_cluster_raw", np.float32, (16, 256, 16), 262144) == (2, 128 * 1024)
    assert resident("v6_cluster_raw", BF16, (8, 256, 16), 262144) == (4, 128 * 1024)
    for dtype in DTYPES:
        for cfg in S.raw_configs("v8_warp_stream", dtype):
            blocks = resident("v8_warp_stream", dtype, cfg, 1024)[0]
            assert blocks >= cfg[2], (cfg, blocks)
            assert S.ceil_div(8192, cfg[1] * cfg[3]) <= 132 * blocks, "one wave on an H200"


def test_v11_is_v10_with_the_split_exit_barrier():
    # v11 runs on v10's instances with v10's launches (only the kernel's name differs), one cluster per
    # row with the cluster size on grid x; the dispatcher keeps v10 until the H200 measures v11
    import dataclasses
    for dtype in DTYPES:
        assert S.raw_configs("v11_early_arrive", dtype) == S.raw_configs("v10_cluster_once", dtype)
        for cfg in S.raw_configs("v10_cluster_once", dtype):
            for cols in (1, S.capacity("v10_cluster_once", dtype, cfg)):
                (a,) = S.geometry("v10_cluster_once", 3, cols, dtype, cfg)
                (b,) = S.geometry("v11_early_arrive", 3, cols, dtype, cfg)
                assert b == dataclasses.replace(a, kernel=a.kernel.replace("v10_cluster_once", "v11_early_arrive"))
                assert S.cluster_size(b) == cfg[2]
        for cols in (1024, 65536, 262144):
            assert S.plan(8, cols, dtype) != "v11_early_arrive"


def test_v11_arrives_relaxed_once_and_waits_at_the_end():
    # the PTX of v11: one relaxed arrive and one wait more than v10 (the split exit barrier), and the
    # same number of full cluster barriers minus one; a CL of 1 would have none (no instance has it)
    import re
    from utils.build import KernelSource, ptx
    exprs = (S.kname("softmax_v10_cluster_once", np.float32, 16, 128, 8),
             S.kname("softmax_v11_early_arrive", np.float32, 16, 128, 8))
    text = ptx(KernelSource("softmax.cu", name_expressions=exprs))
    bodies = {m.group(1): m.group(2) for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", text, re.S)}
    v10 = next(b for k, b in bodies.items() if "v10" in k)
    v11 = next(b for k, b in bodies.items() if "v11" in k)
    assert v10.count("barrier.cluster.arrive.relaxed") == 0
    assert v11.count("barrier.cluster.arrive.relaxed.aligned") == 1
    arrives = lambda b: len(re.findall(r"barrier\.cluster\.arrive(?:\.aligned)?;", b))   # noqa: E731
    waits = lambda b: b.count("barrier.cluster.wait")                                       # noqa: E731
    assert (arrives(v10), waits(v10)) == (2, 2) and (arrives(v11), waits(v11)) == (1, 2)
    assert v11.rindex("barrier.cluster.wait") > v11.rindex("st.global")   # the wait comes after the stores


def test_v8_walks_every_row_once():
    # warp w of the grid takes rows w, w + G, ... (G = grid x ROWS warps); with the grid ceil(rows / (ROWS RPW))
    # every row has exactly one warp and no warp walks more than RPW rows
    for dtype in DTYPES:
        for cfg in S.raw_configs("v8_warp_stream", dtype):
            for rows in (1, 5, 7, 8191, 8192, 8193):
                (ln,) = S.geometry("v8_warp_stream", rows, 100, dtype, cfg)
                g = ln.grid[0] * cfg[1]
                walked = [list(range(w, rows, g)) for w in range(g)]
                assert sorted(r for rs in walked for r in rs) == list(range(rows))
                assert max(map(len, walked)) <= cfg[3]


def test_plan_covers_every_row_length_with_a_supporting_version():
    for dtype in DTYPES:
        for cols in (1, 1024, 1025, 2048, 2049, 16384, 16385, 32768, 32769, 65536, 262144, 262145):
            v = S.plan(5, cols, dtype)
            assert S.supports(v, cols, dtype)
            S.geometry(v, 5, cols, dtype)


def test_v9_stream_geometry_is_persistent_and_fits_shared_memory():
    # the persistent grid: as many clusters as fit on 132 SMs (by threads and shared memory), never more
    # than rows; each CTA's double buffer within the 227 KiB a block may have; clusters of at most 16
    for dtype in DTYPES:
        for cfg in S.raw_configs("v9_stream", dtype):
            nc, threads, cl = cfg
            smem = S.stream_smem(dtype, cfg)
            assert smem <= 227 * 1024 and cl in (1, 2, 4, 8, 16) and nc <= 8
            per_sm = S.stream_ctas_per_sm(dtype, cfg)
            assert per_sm * (smem + 2048) <= S.SMEM_PER_SM and per_sm * threads <= 2048
            for rows in (1, 37, 199, 128, 1024, 8192):
                (ln,) = S.geometry("v9_stream", rows, S.capacity("v9_stream", dtype, cfg), dtype, cfg)
                clusters = ln.grid[0] // cl
                assert ln.grid[0] % cl == 0 and 1 <= clusters <= rows
                assert clusters * cl <= S.NUM_SMS * per_sm
                # cluster c walks rows c, c + G, ...: every row exactly once
                walked = sorted(r for c in range(clusters) for r in range(c, rows, clusters))
                assert walked == list(range(rows))
    # the bar shapes' long rows: the default holds the row, every SM is busy
    (ln,) = S.geometry("v9_stream", 128, 262144, np.float32)
    assert ln.cluster == 16 and ln.block == (512, 1, 1) and ln.smem == 128 * 1024 and ln.grid[0] == 128
    if BF16 is not None:
        (ln,) = S.geometry("v9_stream", 128, 262144, BF16)
        assert ln.cluster == 8 and ln.grid[0] == 128


def test_v9_kernel_source_matches_the_host_arithmetic():
    # stream_ctas_per_sm in Python mirrors stream_min_blocks in row_stream.cuh (228 KiB, 2 KiB per CTA)
    from utils.paths import INCLUDE
    src = (INCLUDE / "row_stream.cuh").read_text()
    assert "(228 * 1024) / (2 * 16 * NC * THREADS + 2048)" in src
    assert S.SMEM_PER_SM == 228 * 1024
