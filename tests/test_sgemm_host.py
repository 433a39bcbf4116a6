"""Chapters 10-11 host side on a CPU: the SGEMM registry and its plans (v2-v9: tiles, grids, static shared
memory, config validation, the 16-byte path's conditions, the A tile's layouts, v9's tile order and sweep),
``problem``'s ValueErrors, the float64 reference, the ledger, the byte model (against a warp-by-warp count),
the Nsight Compute export parser, and the ladder's tables read from a hand-made record."""
import sys
import types

import numpy as np
import pytest

from kernels import sgemm as G
from kernels.sgemm import ladders, ledger, traffic
from tests.fakes import FakeDeviceArray
from utils.version import Unsupported

SEED = 10
CEIL = {"copy": 4288.65, "fma_fp32": 65.89}      # chapter 2's H200 record (GB/s, TFLOP/s)


def arrays(M, N, K, *, ptrs=(0x10000, 0x8000000, 0x10000000), dtype=np.float32):
    """Fake device arrays a, b, c at the given pointers (far enough apart for the shapes below 2048^2)."""
    return (FakeDeviceArray((M, K), dtype, ptr=ptrs[0]), FakeDeviceArray((K, N), dtype, ptr=ptrs[1]),
            FakeDeviceArray((M, N), dtype, ptr=ptrs[2]))


# --- the registry and the plans ----------------------------------------------------------------------

def test_registry_holds_v0_and_v1_with_their_files_and_snippets():
    assert list(G.SGEMM)[:2] == ["v0_uncoalesced", "v1_coalesced"]
    v0, v1 = G.SGEMM["v0_uncoalesced"], G.SGEMM["v1_coalesced"]
    assert v1.parent == "v0_uncoalesced" and v0.parent is None
    assert v0.source.file == "sgemm/v00_uncoalesced.cu" and v1.source.file == "sgemm/v01_coalesced.cu"
    from utils.paths import KERNELS
    from utils.show import snippets
    for v in (v0, v1):
        text = (KERNELS / v.source.file).read_text()
        assert v.snippet in snippets(text) and "extern \"C\" __global__" in text and v.name in text


def test_v1_differs_from_v0_only_in_which_index_walks_the_rows():
    """Apart from comments and the kernel's name, the diff the chapter shows swaps threadIdx.x and threadIdx.y."""
    from collections import Counter

    from utils.show import snippet_diff
    diff = snippet_diff("sgemm/v00_uncoalesced.cu", "sgemm_v0", "sgemm/v01_coalesced.cu", "sgemm_v1", 0).splitlines()
    code = {sign: Counter(ln[1:].split("//")[0].strip() for ln in diff if ln[:1] == sign and ln[:3] != sign * 3)
            for sign in "+-"}
    removed, added = code["-"] - code["+"], code["+"] - code["-"]
    assert set(removed) == {"sgemm_v0_uncoalesced(int M, int N, int K, float alpha, const float* __restrict__ A,",
                            "const int row = blockIdx.x * 32 + threadIdx.x;",
                            "const int col = blockIdx.y * 32 + threadIdx.y;"}, removed
    assert set(added) == {"sgemm_v1_coalesced(int M, int N, int K, float alpha, const float* __restrict__ A,",
                          "const int row = blockIdx.x * 32 + threadIdx.y;",
                          "const int col = blockIdx.y * 32 + threadIdx.x;"}, added


@pytest.mark.parametrize("shape,grid", [((1, 1, 1), (1, 1, 1)), ((37, 199, 1823), (2, 7, 1)),
                                        ((4096, 4096, 4096), (128, 128, 1)), ((1, 12288, 4096), (1, 384, 1)),
                                        ((4095, 4097, 1023), (128, 129, 1))])
@pytest.mark.parametrize("label", ["v0_uncoalesced", "v1_coalesced"])
def test_plans_cover_c_with_32x32_blocks_and_pass_the_arguments_in_order(label, shape, grid):
    M, N, K = shape
    a, b, c = arrays(M, N, K, ptrs=(1 << 36, 2 << 36, 3 << 36))
    v = G.SGEMM[label]
    p = v.validate(a, b, c, alpha=2.0, beta=-0.5)
    (ln,) = v.launches(p)
    assert ln.kernel == v.name and ln.grid == grid and ln.block == (32, 32, 1) and ln.smem == 0
    assert ln.grid[0] * 32 >= M > (ln.grid[0] - 1) * 32 and ln.grid[1] * 32 >= N > (ln.grid[1] - 1) * 32
    m, n, k, alpha, pa, pb, beta, pc = ln.args
    assert [type(x) for x in (m, n, k, alpha, beta)] == [np.int32, np.int32, np.int32, np.float32, np.float32]
    assert (int(m), int(n), int(k), float(alpha), float(beta)) == (M, N, K, 2.0, -0.5)
    assert (pa, pb, pc) == (a, b, c)


def test_plans_refuse_more_column_tiles_than_grid_y_holds():
    p = G.shape_problem(1, 65535 * 32 + 1, 1)
    naive = [G.SGEMM["v0_uncoalesced"], G.SGEMM["v1_coalesced"]]
    for v in naive:
        with pytest.raises(Unsupported, match="grid y"):
            v.launches(p)
    assert all(v.supports(G.shape_problem(1, 65535 * 32, 1)) for v in naive)


# --- problem: clear errors ---------------------------------------------------------------------------

def test_problem_returns_the_sizes_and_the_arrays():
    a, b, c = arrays(37, 199, 1823)
    p = G.problem(a, b, c, beta=1)
    assert (p.M, p.N, p.K, p.alpha, p.beta) == (37, 199, 1823, 1.0, 1.0) and p.out is c and p.shape == (37, 199, 1823)


@pytest.mark.parametrize("broken,match", [
    (lambda a, b, c: (FakeDeviceArray((4, 8), np.float64), b, c), "a: expected dtype float32, got float64"),
    (lambda a, b, c: (a, b, FakeDeviceArray((4, 5), np.float16, ptr=0x10000000)), "c: expected dtype float32"),
    (lambda a, b, c: (FakeDeviceArray((32,), np.float32), b, c), "a: expected 2 dimensions"),
    (lambda a, b, c: (a, FakeDeviceArray((9, 5), np.float32, ptr=0x8000000), c), r"b: expected 8 rows"),
    (lambda a, b, c: (a, b, FakeDeviceArray((5, 4), np.float32, ptr=0x10000000)), r"c: expected shape \(4, 5\)"),
    (lambda a, b, c: (FakeDeviceArray((4, 8), np.float32, strides=(4, 16)), b, c), "C-contiguous"),
    (lambda a, b, c: (a, FakeDeviceArray((8, 5), np.float32, ptr=0x8000002), c), "4-byte aligned"),
    (lambda a, b, c: (np.zeros((4, 8), np.float32), b, c), "expected a CUDA device array"),
    (lambda a, b, c: (a, b, FakeDeviceArray((4, 5), np.float32, ptr=0x10000 + 4 * 8)), "c: overlaps the memory of a"),
    (lambda a, b, c: (a, b, FakeDeviceArray((4, 5), np.float32, ptr=0x8000000 + 16)), "c: overlaps the memory of b"),
])
def test_problem_names_what_is_wrong(broken, match):
    with pytest.raises(ValueError, match=match):
        G.problem(*broken(*arrays(4, 5, 8)))


def test_problem_accepts_an_unaligned_but_4_byte_aligned_view_and_adjacent_outputs():
    a, b, _ = arrays(4, 5, 8, ptrs=(0x10004, 0x8000004, 0))
    c = FakeDeviceArray((4, 5), np.float32, ptr=0x10004 + 4 * 32)     # right after a: no overlap
    assert G.problem(a, b, c).M == 4


@pytest.mark.parametrize("shape,name", [((2**16, 1, 2**15), "a"), ((1, 2**16, 2**15), "b"), ((2**16, 2**15, 1), "c")])
def test_matrices_of_2_31_elements_are_refused(shape, name):
    with pytest.raises(ValueError, match=f"{name}: .* 32-bit offsets"):
        G.shape_problem(*shape)
    M, N, K = shape
    with pytest.raises(ValueError, match=f"{name}: .* 32-bit offsets"):
        G.problem(*arrays(M, N, K, ptrs=(0, 2**40, 2**42)))


@pytest.mark.parametrize("kw,match", [({"M": 0}, "M: expected a positive int"), ({"K": 2.0}, "K: expected a positive int"),
                                      ({"N": True}, "N: expected a positive int"), ({"alpha": float("nan")}, "alpha: .*finite"),
                                      ({"beta": float("inf")}, "beta: .*finite"), ({"beta": "x"}, "beta: expected a real")])
def test_shape_problem_refuses_bad_sizes_and_scalars(kw, match):
    args = {"M": 2, "N": 3, "K": 4, **kw}
    with pytest.raises(ValueError, match=match):
        G.shape_problem(**args)


# --- the reference and the cost model -----------------------------------------------------------------

def test_reference_is_alpha_ab_plus_beta_c_in_float64_and_ignores_c_when_beta_is_zero():
    rng = np.random.default_rng(SEED)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5), (5, 4), (3, 4)))
    want = 1.5 * (a.astype(np.float64) @ b.astype(np.float64)) - 0.25 * c.astype(np.float64)
    got = G.reference(a, b, c, alpha=1.5, beta=-0.25)
    assert got.dtype == np.float64 and np.allclose(got, want, rtol=1e-15, atol=1e-15)
    poisoned = np.full((3, 4), np.nan, np.float32)
    assert np.isfinite(G.reference(a, b, poisoned, alpha=2.0, beta=0.0)).all()
    with pytest.raises(ValueError, match="beta != 0 needs c"):
        G.reference(a, b, None, beta=1.0)


def test_cost_model():
    assert G.flops(2, 3, 4) == 48
    assert G.nbytes(2, 3, 4) == 4 * (8 + 12 + 6) and G.nbytes(2, 3, 4, beta=1.0) == 4 * (8 + 12 + 12)
    for n in (1024, 4096, 8192):
        assert G.intensity(n, n, n) == pytest.approx(n / 6)
    assert G.intensity(1, 12288, 4096) == pytest.approx(2 * 12288 * 4096 / (4 * (4096 + 4096 * 12288 + 12288)))


# --- the ledger --------------------------------------------------------------------------------------

def test_ledger_shapes_are_the_issue_s_squares_and_llm_shapes():
    s = ledger.SHAPES
    assert [s[f"square {n}"] for n in (1024, 2048, 4096, 8192)] == [(n, n, n) for n in (1024, 2048, 4096, 8192)]
    assert s["QKV projection, prefill"] == (8192, 3 * 4096, 4096) and s["MLP up-projection, prefill"] == (8192, 11008, 4096)
    assert [v[0] for k, v in s.items() if "decode" in k] == [1, 4, 16]
    assert set(ledger.TAGS) == set(s)


def test_ledger_floors_and_bounds():
    assert ledger.ridge(CEIL) == pytest.approx(65.89e12 / 4288.65e9)
    t_flops, t_bytes = ledger.floor_us((4096, 4096, 4096), CEIL)
    assert t_flops == pytest.approx(2 * 4096**3 / 65.89e12 * 1e6) and t_bytes == pytest.approx(12 * 4096**2 / 4288.65e9 * 1e6)
    assert 2000 < t_flops < 2200 and 40 < t_bytes < 50
    bounds = {name: ledger.bound(s, CEIL) for name, s in ledger.SHAPES.items()}
    assert [n for n, b in bounds.items() if b == "memory"] == [n for n in ledger.SHAPES if "decode" in n]
    table = ledger.ledger_table(CEIL)
    assert len(table.rows) == len(ledger.SHAPES) and table.column("bound by")[-1] == "memory"
    assert table.column("FLOP/B")[0] == "170.7" and table.column("FLOP/B")[3] == "1,365.3"


def test_ledger_points_sit_on_the_roof():
    for e in ledger.ledger_points(CEIL):
        ai = e["flops"] / e["bytes"]
        attained = e["flops"] / (e["ms"] * 1e-3) / 1e12
        assert attained == pytest.approx(min(CEIL["fma_fp32"], CEIL["copy"] * 1e9 * ai / 1e12))
        assert e["series"] in ("square (floor)", "LLM shapes (floor)") and e["tag"]


def test_measured_ceilings_fall_back_to_the_stored_record(monkeypatch, tmp_path):
    import utils.gpu
    import utils.hardware
    import utils.paths

    def missing(*a, **k):
        raise LookupError("no record here")
    monkeypatch.setattr(utils.hardware, "ceilings", missing)
    monkeypatch.setattr(utils.gpu, "gpu_slug", lambda: "nvidia-h200")
    got = ledger.measured_ceilings()
    assert got["copy"] > 4000 and got["fma_fp32"] > 60          # the repository's chapter 2 record
    monkeypatch.setattr(utils.paths, "REPO", tmp_path)
    with pytest.raises(LookupError):
        ledger.measured_ceilings()


# --- the byte model ----------------------------------------------------------------------------------

def brute_force(label, M, N, K, beta=0.0):
    """Every warp of every block, lane by lane: requests, sectors and lines of loads and stores, and the
    distinct A, B (and C) sectors each block touches (each matrix at its own 32-byte aligned base)."""
    out = dict.fromkeys(("ld_req", "ld_sec", "ld_line", "st_req", "st_sec", "st_line", "l2"), 0)

    def access(kind, addrs):
        out[kind + "_req"] += 1
        out[kind + "_sec"] += len({x // 32 for x in addrs})
        out[kind + "_line"] += len({x // 128 for x in addrs})

    for bx in range(-(-M // 32)):
        for by in range(-(-N // 32)):
            panel = {"A": set(), "B": set(), "C": set()}
            for ty in range(32):
                lanes = []
                for tx in range(32):
                    row, col = (bx * 32 + tx, by * 32 + ty) if label == "v0_uncoalesced" else (bx * 32 + ty, by * 32 + tx)
                    if row < M and col < N:
                        lanes.append((row, col))
                if not lanes:
                    continue
                for k in range(K):
                    a = [4 * (r * K + k) for r, _ in lanes]
                    b = [4 * (k * N + c) for _, c in lanes]
                    access("ld", a)
                    access("ld", b)
                    panel["A"] |= {x // 32 for x in a}
                    panel["B"] |= {x // 32 for x in b}
                cs = [4 * (r * N + c) for r, c in lanes]
                if beta:
                    access("ld", cs)
                    panel["C"] |= {x // 32 for x in cs}
                access("st", cs)
            out["l2"] += sum(len(s) for s in panel.values())
    return out


ODD = [(1, 1, 1), (5, 3, 2), (37, 45, 9), (33, 65, 7), (31, 97, 12), (70, 33, 1), (64, 64, 16), (3, 40, 300)]


@pytest.mark.parametrize("beta", [0.0, 1.0])
@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("label", traffic.LABELS)
def test_byte_model_matches_a_warp_by_warp_count(label, shape, beta):
    t = traffic.traffic(label, *shape, beta)
    want = brute_force(label, *shape, beta)
    got = {"ld_req": t.load_requests, "ld_sec": t.load_sectors, "ld_line": t.load_lines, "st_req": t.store_requests,
           "st_sec": t.store_sectors, "st_line": t.store_lines, "l2": t.l2_read_sectors}
    assert got == want


def test_byte_model_at_the_profiled_shape():
    n = 2048
    v0, v1 = (traffic.traffic(lab, n, n, n) for lab in traffic.LABELS)
    warps = n * n // 32
    assert v0.load_requests == v1.load_requests == 2 * warps * n           # the same instructions
    assert v0.load_sectors == warps * n * (32 + 1) and v1.load_sectors == warps * n * (1 + 4)
    assert (v0.sectors_per_request, v1.sectors_per_request) == (16.5, 2.5)
    assert (v0.lines_per_request, v1.lines_per_request) == (16.5, 1.0)
    assert v0.store_sectors == n * n and v1.store_sectors == n * n // 8
    blocks = (n // 32) ** 2
    assert v0.l2_read_sectors == v1.l2_read_sectors == blocks * 2 * (32 * n * 4 // 32)
    assert v0.dram_read_min_bytes == 8 * n * n and v0.dram_write_bytes == 4 * n * n
    assert v0.l1_hit_rate == pytest.approx(1 - 1 / 132) and v1.l1_hit_rate == pytest.approx(0.95)


def test_touched_counts_by_offset():
    assert traffic.touched([0, 4, 32], stride=4, lanes=32, unit=32) == 4 + 5 + 4
    assert traffic.touched([0], stride=4 * 1000, lanes=17, unit=32) == 17
    assert traffic.touched([0, 8], stride=0, lanes=32, unit=128) == 2
    assert traffic.touched([], stride=4, lanes=32, unit=32) == 0


def test_l1_time_model_predicts_v1_16x_faster_than_v0_and_half_a_tflop_for_v0():
    from utils.hardware import facts
    f = facts("H200")
    p0 = traffic.predictions("v0_uncoalesced", [(2048, 2048, 2048)], f)[(2048, 2048, 2048), "float32"]
    p1 = traffic.predictions("v1_coalesced", [(2048, 2048, 2048)], f)[(2048, 2048, 2048), "float32"]
    clock = f.sm_clock_khz * 1e3
    assert p0 == pytest.approx(132 * clock * 64 / 33 / 1e12, rel=1e-3)   # a warp-k: 64 FLOPs for 32 + 1 lines
    assert 0.45 < p0 < 0.55 and 8.0 < p1 < 8.7
    assert p1 / p0 == pytest.approx(33 / 2, rel=1e-3)


def test_byte_model_covers_only_v0_and_v1():
    with pytest.raises(KeyError):
        traffic.traffic("v7_nothing", 4, 4, 4)


def test_model_table_has_one_column_per_version():
    t = traffic.model_table((64, 64, 64))
    assert t.columns == ["per launch", "v0_uncoalesced", "v1_coalesced"]
    assert t.column("v1_coalesced")[2] == "2.50" and t.column("v0_uncoalesced")[2] == "16.50"


def test_human():
    assert traffic.human(None) == "—" and traffic.human(1.342e9) == "1.34 G" and traffic.human(512) == "512"


# --- Nsight Compute ----------------------------------------------------------------------------------

RAW = '''==PROF== Connected to process 1234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","dram__bytes_read.sum","gpu__time_duration.sum","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct","lts__t_sectors_srcunit_tex_op_read.sum"
"","","","","","","","Mbyte","msecond","","sector","%","sector"
"0","1234","python3","h200","sgemm_v0_uncoalesced","1","7","33.62","35.10","536,870,912","8,858,370,048","99.1","70,000,000"
"1","1234","python3","h200","sgemm_v1_coalesced","1","7","33.60","2.40","536,870,912","1,342,177,280","94.8","71,000,000"
'''


def test_parse_ncu_csv_applies_the_units_row_and_thousands_separators():
    rows = traffic.parse_ncu_csv(RAW)
    assert [r["kernel"] for r in rows] == ["sgemm_v0_uncoalesced", "sgemm_v1_coalesced"]
    v0 = rows[0]
    assert v0["dram__bytes_read.sum"] == pytest.approx(33.62e6) and v0["gpu__time_duration.sum"] == pytest.approx(35.1e6)
    assert v0["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 8_858_370_048
    assert v0["l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct"] == 99.1 and "Host Name" not in v0


def test_parse_ncu_csv_reads_units_in_the_header_and_refuses_other_text():
    text = '"ID","Kernel Name","dram__bytes_read.sum [Kbyte]","x__y.sum"\n"0","k","1,024","n/a"\n'
    (row,) = traffic.parse_ncu_csv(text)
    assert row == {"kernel": "k", "dram__bytes_read.sum": 1.024e6}
    with pytest.raises(ValueError, match="not an ncu raw CSV"):
        traffic.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no permission\n")
    with pytest.raises(ValueError, match="unit 'furlong'"):
        traffic.parse_ncu_csv('"ID","Kernel Name","a__b.sum"\n"","","furlong"\n"0","k","1"\n')
    # ncu's own launch metrics, in units the parser does not know, are left out when the wanted are named
    text = '"ID","Kernel Name","launch__block_size","a__b.sum"\n"","","block","sector"\n"0","k","256","7"\n'
    assert traffic.parse_ncu_csv(text, ["a__b.sum"]) == [{"kernel": "k", "a__b.sum": 7.0}]
    with pytest.raises(ValueError, match="unit 'block'"):
        traffic.parse_ncu_csv(text)


def test_parse_ncu_csv_reads_the_short_time_units_of_ncu_2025():
    # ncu 2025.3 on the H200 writes "ns" where older versions wrote "nsecond"
    text = '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"\n"","","us","MB"\n"0","k","2.5","3"\n'
    (row,) = traffic.parse_ncu_csv(text)
    assert row["gpu__time_duration.sum"] == pytest.approx(2500.0) and row["dram__bytes_read.sum"] == pytest.approx(3e6)


def test_by_label_and_comparison():
    counters = traffic.by_label(traffic.parse_ncu_csv(RAW))
    assert set(counters) == {"v0_uncoalesced", "v1_coalesced"}
    cmp = traffic.comparison((2048, 2048, 2048), counters)
    assert cmp["v0_uncoalesced"]["requests"] == pytest.approx(1.0) and cmp["v1_coalesced"]["sectors"] == pytest.approx(1.0)
    assert cmp["v0_uncoalesced"]["l2_over_model"] == pytest.approx(70e6 / 67108864)
    assert cmp["v1_coalesced"]["dram_over_min"] == pytest.approx(33.6e6 / 33554432)
    assert cmp["v0_uncoalesced"]["duration_us"] == pytest.approx(35100) and cmp["v0_uncoalesced"]["instructions"] is None
    assert all(v is None for v in traffic.comparison((2048,) * 3, None)["v0_uncoalesced"].values())
    with pytest.raises(ValueError, match="no launch of sgemm_v1_coalesced"):
        traffic.by_label(traffic.parse_ncu_csv(RAW)[:1])


def test_compare_table_shows_dashes_without_ncu_and_figures_with_it():
    empty = traffic.compare_table((2048,) * 3, None)
    assert empty.column("v0_uncoalesced ncu") == ["—"] * len(empty.rows)
    full = traffic.compare_table((2048,) * 3, traffic.by_label(traffic.parse_ncu_csv(RAW)))
    assert full.column("v0_uncoalesced ncu")[1] == "8.86 G" and full.column("v1_coalesced ncu")[-1] == "94.8%"
    assert full.column("v1_coalesced model")[3] == "67.1 M (at most 1.34 G)"
    texts = traffic.glue_texts((2048,) * 3, traffic.by_label(traffic.parse_ncu_csv(RAW)))
    assert texts["ncu_v0_sectors"] == "1.000" and texts["ncu_v1_l1_hit_pct"] == "94.8%"
    assert texts["ncu_v0_instructions"] == "n/a" and texts["ncu_v0_duration_us"] == "35,100"
    assert set(traffic.glue_texts((2048,) * 3, None).values()) == {"n/a"}


def test_ncu_command_leaves_clocks_alone_and_profiles_warm_launches_only():
    cmd = traffic.ncu_command("/tmp/r", (2048, 2048, 2048), ncu="ncu", python="python3")
    line = " ".join(cmd)
    assert "--clock-control none" in line and "--profile-from-start off" in line and "regex:^sgemm_v" in line
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(traffic.NCU_METRICS.values())
    assert cmd[-6:] == ["kernels.sgemm.traffic", "2048", "2048", "2048", "v0_uncoalesced", "v1_coalesced"]
    assert "--print-units" in traffic.export_command("r.ncu-rep")


def test_profile_without_ncu_prints_one_line_and_returns_none(monkeypatch, capsys):
    monkeypatch.setattr(traffic, "find_ncu", lambda: None)
    assert traffic.profile() is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("skipped: Nsight Compute (ncu) is not on PATH")


def test_find_ncu_looks_on_path_then_in_the_toolkit(tmp_path):
    import os
    on_path, toolkit = tmp_path / "path", tmp_path / "cuda"
    for d in (on_path, toolkit / "bin"):
        d.mkdir(parents=True)
        (d / "ncu").write_text("#!/bin/sh\n")
        os.chmod(d / "ncu", 0o755)
    assert traffic.find_ncu({"PATH": str(on_path), "CUDA_HOME": str(toolkit)}) == str(on_path / "ncu")
    assert traffic.find_ncu({"PATH": str(tmp_path), "CUDA_HOME": str(toolkit)}) == str(toolkit / "bin" / "ncu")
    os.chmod(toolkit / "bin" / "ncu", 0o644)
    assert traffic.find_ncu({"PATH": str(tmp_path), "CUDA_PATH": str(toolkit)}) in (None, "/usr/local/cuda/bin/ncu")


def test_profile_reports_a_failing_ncu_in_one_line(monkeypatch, capsys, tmp_path):
    import subprocess
    monkeypatch.setattr(traffic, "find_ncu", lambda: "/usr/bin/ncu")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a[0], 1, "==PROF== Connected\n", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n"))
    assert traffic.profile() is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "ERR_NVGPUCTRPERM" in out and "exited with 1" in out


# --- the ladder and its tables -----------------------------------------------------------------------

def test_ladder_is_built_without_a_gpu_with_flops_bytes_and_no_copy_ceiling(tmp_path):
    from utils.record import Record
    lad = ladders.ladder(Record("10-naive-gemm", gpu="cpu-test", root=tmp_path))
    assert lad.ceiling is None and lad.shapes == ladders.SHAPES and lad.odd_shapes == ladders.ODD_SHAPES
    assert list(lad.peers) == ["cupy.matmul", "torch.matmul"] and lad.dtypes == ["float32"]
    assert lad.cost((4, 5, 6), "float32") == {"nbytes": 4 * (24 + 30 + 20), "flops": 240}
    assert set(ladders.V0_SHAPES) <= set(ladders.SHAPES) and ladders.CLAIM_SHAPE in ladders.V0_SHAPES
    assert (1, 1, 1) in ladders.ODD_SHAPES and (37, 199, 1823) in ladders.ODD_SHAPES
    assert any(s[2] < 8 for s in ladders.ODD_SHAPES) and any(s[0] % 32 and s[1] % 32 for s in ladders.ODD_SHAPES)


def recorded(tmp_path, tflops_by_impl: dict, shapes):
    """A ladder over a record filled by hand: every impl at the given TFLOP/s on every shape."""
    from utils.record import Record
    rec = Record("10-naive-gemm", gpu="cpu-test", root=tmp_path)
    for impl, tf in tflops_by_impl.items():
        for s in shapes:
            f = G.flops(*s)
            rec.add("sgemm", impl, dtype="float32", shape=s, ms=f / (tf * 1e12) * 1e3, flops=f, nbytes=G.nbytes(*s),
                    is_peer=impl in ladders.PEERS)
    return ladders.ladder(rec, shapes)


def test_speedups_and_peer_table_read_the_record(tmp_path):
    s = ladders.CLAIM_SHAPE
    lad = recorded(tmp_path, {"v0_uncoalesced": 0.5, "v1_coalesced": 8.0, "cupy.matmul": 45.0, "torch.matmul": 44.0}, [s])
    table, ratio = ladders.speedups(lad)
    assert ratio["cupy.matmul", "v0_uncoalesced"] == pytest.approx(90) and ratio["torch.matmul", "v1_coalesced"] == pytest.approx(5.5)
    assert table.column("cupy.matmul is faster by") == ["90.0x", "5.6x"]
    peers = ladders.peer_table(lad, 65.89)
    assert peers.rows[0][:3] == ["2048x2048x2048", "45.0", "68%"] and peers.rows[0][-1] == "0.98"
    pts = ladders.roofline_points(lad, ["v0_uncoalesced", "cupy.matmul"], [s])
    assert [(p["series"], p["tag"]) for p in pts] == [("v0_uncoalesced", "2048^3"), ("cupy.matmul (peer)", "2048^3")]
    assert all(p["bytes"] == G.nbytes(*s) for p in pts)
    with pytest.raises(KeyError, match="nothing recorded for v1_coalesced"):
        ladders.tflops(recorded(tmp_path, {"v0_uncoalesced": 1.0}, [s]), "v1_coalesced", s)


@pytest.mark.parametrize("setting", [True, False])
def test_tf32_off_restores_the_callers_setting(monkeypatch, setting):
    matmul = types.SimpleNamespace(allow_tf32=setting)
    fake = types.SimpleNamespace(backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul)))
    monkeypatch.setitem(sys.modules, "torch", fake)
    with ladders.tf32_off():
        assert matmul.allow_tf32 is False
    assert matmul.allow_tf32 is setting
    with pytest.raises(RuntimeError), ladders.tf32_off():
        raise RuntimeError("a failing matmul")
    assert matmul.allow_tf32 is setting


def test_cublas_peer_refuses_tf32(monkeypatch):
    monkeypatch.setenv("CUPY_TF32", "1")
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace())
    with pytest.raises(RuntimeError, match="CUPY_TF32"):
        ladders.cublas_peer(None)


def test_the_ladder_tables_keep_three_significant_digits_for_the_naive_kernels(tmp_path):
    s, m1 = ladders.CLAIM_SHAPE, (1, 12288, 4096)
    lad = recorded(tmp_path, {"v0_uncoalesced": 0.512, "v1_coalesced": 7.43, "cupy.matmul": 45.0, "torch.matmul": 44.0},
                   [s, m1])
    lad.predict("v0_uncoalesced", 0.507, s, "float32")
    t = lad.table(["v0_uncoalesced", "v1_coalesced"])
    assert t.columns == ["shape", "dtype", "version", "µs", "TFLOP/s", "predicted", "vs cupy.matmul", "vs torch.matmul"]
    assert t.rows[0][2:] == ["v0_uncoalesced", f"{G.flops(*s) / 0.512e12 * 1e6:.1f}", "0.512", "0.507", "0.011x",
                             "0.012x"]
    assert t.rows[1][4:6] == ["7.43", ""] and len(t.rows) == 4
    summ = lad.summary()
    assert summ.columns == ["shape", "dtype", "v0_uncoalesced", "v1_coalesced", "cupy.matmul", "torch.matmul"]
    assert summ.rows[1] == ["1x12288x4096", "float32", "0.512", "7.43", "45", "44"]


def test_profile_reads_the_export_and_retries_it_without_print_units(monkeypatch):
    import pathlib
    import subprocess
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        if "-o" in cmd:                                    # the profiling run writes its report
            pathlib.Path(cmd[cmd.index("-o") + 1] + ".ncu-rep").write_text("report")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if "--print-units" in cmd:                         # an ncu that does not know the option
            return subprocess.CompletedProcess(cmd, 1, "", "==ERROR== unrecognised option '--print-units'")
        return subprocess.CompletedProcess(cmd, 0, RAW, "")
    monkeypatch.setattr(traffic, "find_ncu", lambda: "/opt/ncu/ncu")
    monkeypatch.setattr(subprocess, "run", run)
    got = traffic.profile()
    assert set(got) == {"v0_uncoalesced", "v1_coalesced"} and len(calls) == 3
    assert got["v1_coalesced"]["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 1_342_177_280
    assert calls[0][0] == "/opt/ncu/ncu" and calls[1][:2] == ["/opt/ncu/ncu", "-i"]


def test_tf32_off_silences_only_pytorchs_note_on_the_legacy_flag(monkeypatch):
    import warnings

    class Matmul:
        def __init__(self):
            self._v = True

        @property
        def allow_tf32(self):
            warnings.warn("Please use the new API settings to control TF32 behavior, such as ...", UserWarning)
            return self._v

        @allow_tf32.setter
        def allow_tf32(self, v):
            self._v = v
    matmul = Matmul()
    fake = types.SimpleNamespace(backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=matmul)))
    monkeypatch.setitem(sys.modules, "torch", fake)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with ladders.tf32_off():
            warnings.warn("an unrelated warning", UserWarning)
    assert [str(w.message) for w in seen] == ["an unrelated warning"] and matmul._v is True


# --- chapter 11: the tiled versions v2-v9 ------------------------------------------------------------

TILED = ["v2_smem_tile", "v3_reg1d", "v4_reg2d", "v5_vec4", "v6_swizzle", "v7_double_buffer", "v8_warptile",
         "v9_tuned"]
VEC4 = TILED[3:]
ODD = [(1, 1, 1), (37, 199, 1823), (1, 4096, 4096), (4095, 4097, 1023), (4096, 4096, 4096), (128, 128, 8)]


def test_the_ladder_continues_with_v2_to_v9_each_extending_the_one_before():
    assert list(G.SGEMM) == ["v0_uncoalesced", "v1_coalesced", *TILED]
    from utils.paths import KERNELS
    from utils.show import snippets
    for prev, label in zip(["v1_coalesced", *TILED], TILED):
        v = G.SGEMM[label]
        assert v.parent == prev and v.number == G.SGEMM[prev].number + 1
        assert v.source.file == f"sgemm/v{v.number:02d}_{v.idea}.cu"
        text = (KERNELS / v.source.file).read_text()
        assert v.snippet == f"sgemm_v{v.number}" and v.snippet in snippets(text) and v.name in text
        assert v.source.name_expressions and all(e.startswith(v.name + "<") for e in v.source.name_expressions)
        assert v.default(None) in v.all_configs() and not v.requires   # every rung builds for sm_80
    for file, snip in (("sgemm/atile.cuh", "sgemm_atile"), ("sgemm/warptile.cuh", "sgemm_warptile")):
        assert snip in snippets((KERNELS / file).read_text())


@pytest.mark.parametrize("label", TILED)
def test_every_instantiated_config_plans_and_names_an_instantiated_kernel(label):
    v = G.SGEMM[label]
    for c in v.all_configs():
        for shape in ODD:
            (ln,) = v.launches(G.shape_problem(*shape), c)
            assert ln.kernel in v.source.name_expressions, (c, ln.kernel)
            assert ln.block == (G.threads_of(c), 1, 1) and ln.smem == 0


@pytest.mark.parametrize("label", TILED)
@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s)))
def test_tiled_grids_cover_c_exactly_once(label, shape):
    """One block per BM x BN tile: enough to cover C, not one more (v9 lists them on x, the others as v2)."""
    M, N, K = shape
    v = G.SGEMM[label]
    c = v.default(None)
    (ln,) = v.launches(G.shape_problem(M, N, K))
    tiles_m, tiles_n = -(-M // c.bm), -(-N // c.bn)
    assert ln.grid == ((tiles_m * tiles_n, 1, 1) if label == "v9_tuned" else (tiles_n, tiles_m, 1))


@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s)))
def test_non_square_tiles_put_columns_on_x_and_rows_on_y(shape):
    M, N, K = shape
    p = G.shape_problem(M, N, K)
    (ln,) = G.plan_tiled("sgemm_v4_reg2d", G.v4_name)(p, G.Tile(128, 64, 8, 8, 8))
    assert ln.grid == (-(-N // 64), -(-M // 128), 1) and ln.block == (128, 1, 1)
    for c in G.V9_CONFIGS:
        (ln,) = G.SGEMM["v9_tuned"].launches(p, c)
        assert ln.grid == (-(-M // c.bm) * -(-N // c.bn), 1, 1) and ln.block == (G.threads_of(c), 1, 1)


def test_default_tiles_threads_and_shared_memory():
    expect = {  # label: (bm, bn, bk, threads, static smem bytes)
        "v2_smem_tile": (32, 32, 32, 1024, 8192), "v3_reg1d": (64, 64, 8, 512, 4096),
        "v4_reg2d": (128, 128, 8, 256, 8192), "v5_vec4": (128, 128, 8, 256, 8192),
        "v6_swizzle": (128, 128, 8, 256, 8192), "v7_double_buffer": (128, 128, 8, 256, 16384),
        "v8_warptile": (128, 128, 8, 256, 16384), "v9_tuned": (128, 128, 8, 256, 16384)}
    for label, (bm, bn, bk, threads, smem) in expect.items():
        c = G.SGEMM[label].default(None)
        stages = 2 if G.SGEMM[label].number >= 7 else 1
        assert (c.bm, c.bn, c.bk, G.threads_of(c), G.smem_bytes(c, stages)) == (bm, bn, bk, threads, smem), label
    pad = G.V6(128, 128, 8, 8, 8, "pad")
    assert G.smem_bytes(pad) == 4 * (8 * 132 + 8 * 128)    # rows of BM + 32 / BK floats


def test_v9_space_is_small_and_every_config_is_valid():
    assert 4 <= len(G.V9_CONFIGS) <= 8 and len(set(G.V9_CONFIGS)) == len(G.V9_CONFIGS)
    assert G.V9_DEFAULT == G.V9_CONFIGS[0] and G.V9_DEFAULT[:6] == tuple(G.V8_WARP)
    for c in G.V9_CONFIGS:
        G.check_config("v9", c, stages=2, vec4=True)
    assert len(G.V9_SOURCE.name_expressions) == 3 * len(G.V9_CONFIGS)      # 16-byte untested and tested, 4-byte


def test_v9_plan_takes_the_untested_instance_only_where_the_tiles_divide_the_shape():
    c = G.V9_DEFAULT

    def kernel(M, N, K):
        (ln,) = G.plan_v9(G.shape_problem(M, N, K), c)
        return ln.kernel
    assert kernel(4096, 4096, 4096).endswith("true, true>") and kernel(8192, 11008, 4096).endswith("true, true>")
    assert kernel(4096, 4096, 4092).endswith("true, false>")      # K % 8 != 0: the residue slice needs tests
    assert kernel(4000, 4096, 4096).endswith("true, false>")      # M % 128 != 0: edge tiles
    assert kernel(4096, 4097, 4096).endswith("false, false>")     # N % 4 != 0: the 4-byte path
    assert not G.whole_tiles(G.shape_problem(1, 12288, 4096), c)


@pytest.mark.parametrize("config,match", [
    (G.Warp(128, 128, 8, 48, 32, 2), "must divide the block tile"),
    (G.Warp(128, 128, 8, 64, 32, 3), "must split into sub-tiles"),
    (G.Warp(128, 128, 8, 64, 8, 4), "must split into sub-tiles"),
    (G.Warp(256, 256, 8, 32, 32, 2), "threads per block"),
    (G.Warp(256, 256, 32, 64, 64, 4), "static shared memory"),
    (G.Warp(128, 128, 6, 64, 32, 2), "groups of 4"),
    (G.Warp(128, 128, 64, 64, 32, 2), "4 <= bk <= 32"),
])
def test_check_config_names_what_is_wrong(config, match):
    with pytest.raises(Unsupported, match=match):
        G.check_config("sgemm_v8_warptile", config, stages=2, vec4=True)


def test_v6_refuses_padding_with_bk_16_and_v3_a_thread_tile_that_does_not_divide():
    with pytest.raises(Unsupported, match="use layout='xor'"):
        G.check_config("sgemm_v6_swizzle", G.V6(128, 128, 16, 8, 8, "pad"), vec4=True)
    G.check_config("sgemm_v6_swizzle", G.V6(128, 128, 16, 8, 8, "xor"), vec4=True)
    with pytest.raises(Unsupported, match="must divide"):
        G.check_config("sgemm_v3_reg1d", G.Tile(64, 64, 8, 6, 1))
    with pytest.raises(ValueError, match="not instantiated"):
        G.SGEMM["v8_warptile"].launches(G.shape_problem(64, 64, 64), G.Warp(64, 64, 8, 32, 32, 2))


def test_tiled_plans_refuse_more_row_tiles_than_grid_y_holds():
    for label in TILED[:-1]:
        c = G.SGEMM[label].default(None)
        with pytest.raises(Unsupported, match="grid y"):
            G.SGEMM[label].launches(G.shape_problem(65535 * c.bm + 1, 1, 1))
        assert G.SGEMM[label].supports(G.shape_problem(65535 * c.bm, 1, 1))
    assert G.SGEMM["v9_tuned"].supports(G.shape_problem(65535 * 128 + 1, 1, 1))   # a 1-D grid


def _vec(label, M, N, K, ptrs=(1 << 36, 2 << 36, 3 << 36)):
    v = G.SGEMM[label]
    (ln,) = v.launches(v.validate(*arrays(M, N, K, ptrs=ptrs)))
    return G.is_vec_instance(ln.kernel)


@pytest.mark.parametrize("label", VEC4)
def test_the_16_byte_path_only_where_k_n_and_every_pointer_allow_it(label):
    assert _vec(label, 64, 64, 64) and _vec(label, 1, 4, 4) and _vec(label, 37, 200, 1824)
    assert not _vec(label, 64, 64, 63) and not _vec(label, 64, 66, 64) and not _vec(label, 37, 199, 1823)
    for k in range(3):     # each of A, B, C 4 bytes off a 16-byte boundary
        ptrs = [1 << 36, 2 << 36, 3 << 36]
        ptrs[k] += 4
        assert not _vec(label, 64, 64, 64, tuple(ptrs))
    p = G.shape_problem(64, 64, 64)
    assert G.vec_ok(p) and not G.vec_ok(G.shape_problem(64, 63, 64))


def test_tile_names_are_the_templates_arguments_in_order():
    assert G.v5_name(G.V5_TILE, True) == "sgemm_v5_vec4<128, 128, 8, 8, 8, true>"
    assert G.v6_name(G.V6(128, 128, 8, 8, 8, "pad"), False) == "sgemm_v6_swizzle<128, 128, 8, 8, 8, 1, false>"
    assert G.v9_name(G.V9_DEFAULT, True) == "sgemm_v9_tuned<128, 128, 8, 64, 32, 2, 2, 8, true, false>"
    assert G.is_vec_instance(G.v9_name(G.V9_DEFAULT, True)) and not G.is_vec_instance(G.v9_name(G.V9_DEFAULT, False))
    assert G.is_vec_instance(G.v9_name(G.V9_DEFAULT, True, True))
    assert not G.is_vec_instance(G.v5_name(G.V5_TILE, False))
    with pytest.raises(ValueError, match="VEC argument"):
        G.is_vec_instance(G.v4_name(G.V4_TILE))


# --- the A tile's layouts (atile.cuh), modelled ----------------------------------------------------

def a_tile_index(k: int, m: int, bm: int, bk: int, layout: str) -> int:
    """atile.cuh's ATile<BM, BK, LAYOUT>::at in Python."""
    if layout == "pad":
        return k * (bm + 32 // bk) + m
    return k * bm + (m ^ ((k >> 2) * (128 // bk)))


def store_banks(bm: int, bk: int, layout: str, warp: int = 0, j: int = 0) -> list[int]:
    """The banks one warp's j-th transposed store of A hits (v6-v9's mapping: float4 i -> row i / (bk / 4),
    k (i % (bk / 4)) * 4)."""
    banks = []
    for lane in range(32):
        i = warp * 32 + lane
        m, k = i // (bk // 4), (i % (bk // 4)) * 4
        banks.append(a_tile_index(k + j, m, bm, bk, layout) % 32)
    return banks


def test_the_model_is_the_kernels_index_function():
    from utils.paths import KERNELS
    text = (KERNELS / "sgemm/atile.cuh").read_text()
    assert "static constexpr int LD = LAYOUT == 1 ? BM + 32 / BK : BM;" in text
    assert "return k * LD + (LAYOUT == 2 ? m ^ ((k >> 2) * (128 / BK)) : m);" in text


@pytest.mark.parametrize("bm,bk", [(128, 4), (128, 8), (128, 16), (128, 32), (64, 16), (32, 8)])
def test_the_xor_swizzle_permutes_each_row_and_keeps_groups_of_4_whole(bm, bk):
    for k in range(bk):
        cols = [a_tile_index(k, m, bm, bk, "xor") - k * bm for m in range(bm)]
        assert sorted(cols) == list(range(bm)), f"row {k} is not a permutation"
        assert all(cols[m + 1] == cols[m] + 1 for m in range(bm) if m % 4 != 3), f"row {k}: a 4-float group is split"
        assert all(cols[m] % 4 == 0 for m in range(0, bm, 4))


@pytest.mark.parametrize("bm,bk", [(128, 8), (128, 16), (128, 32), (64, 16)])
def test_the_xor_swizzle_spreads_each_warps_stores_over_32_banks(bm, bk):
    for warp in range(bm * bk // 4 // 32):
        for j in range(4):
            assert sorted(store_banks(bm, bk, "xor", warp, j)) == list(range(32)), (warp, j)


def test_padding_removes_the_conflict_for_bk_8_and_the_plain_layout_has_it():
    assert sorted(store_banks(128, 8, "pad")) == list(range(32))
    plain = [(i // 2) % 32 for i in range(32)]                 # v5: As[k][m] with 128-float rows
    assert max(plain.count(b) for b in set(plain)) == 2


def test_v9_tile_order_visits_every_tile_once():
    """v09_tuned.cu's block -> tile mapping, modelled: a bijection for any group size and ragged last group."""
    def order(tiles_m, tiles_n, group):
        out = []
        for b in range(tiles_m * tiles_n):
            per = group * tiles_n
            first = (b // per) * group
            rows = min(tiles_m - first, group)
            out.append((first + (b % per) % rows, (b % per) // rows))
        return out
    for tm, tn, g in [(1, 1, 8), (33, 7, 8), (32, 33, 8), (5, 9, 1), (3, 4, 16)]:
        seen = order(tm, tn, g)
        assert sorted(seen) == [(i, j) for i in range(tm) for j in range(tn)]
    assert order(16, 2, 8)[:9] == [(i, 0) for i in range(8)] + [(0, 1)]   # down a group, then one right


# --- v9's sweep read back from a record ---------------------------------------------------------------

def test_tuned_config_picks_the_fastest_recorded_config_and_falls_back_to_the_default(tmp_path):
    from utils.ladder import jsonable_config
    from utils.record import Record
    rec = Record("11-tiled-gemm", gpu="cpu-test", root=tmp_path)
    s, other = (4096, 4096, 4096), (1, 12288, 4096)
    assert G.tuned_config(rec, s) == G.V9_DEFAULT and G.tuned_config([], s) == G.V9_DEFAULT
    f = G.flops(*s)
    for c, tf in zip(G.V9_CONFIGS, [40.0, 38.0, 47.5, 41.0, 30.0, 29.0]):
        rec.add("sgemm", G.config_impl(c), dtype="float32", shape=s, ms=f / (tf * 1e12) * 1e3, flops=f,
                config=jsonable_config(c), swept=True, source=G.v9_digest())
    rec.add("sgemm", "v9_tuned", dtype="float32", shape=s, ms=0.5, flops=f, config=jsonable_config(G.V9_CONFIGS[5]))
    rec.add("sgemm", G.config_impl(G.V9_CONFIGS[4]), dtype="float32", shape=other, ms=1.0, flops=f,
            config=jsonable_config(G.V9_CONFIGS[4]), swept=True, source=G.v9_digest())
    # entries that are not a sweep of the current code: a timed variant, a sweep of other code
    rec.add("sgemm", "v9_tuned[v8 order]", dtype="float32", shape=s, ms=1e-6, flops=f,
            config=jsonable_config(G.V9_CONFIGS[1]))
    rec.add("sgemm", G.config_impl(G.V9_CONFIGS[5]), dtype="float32", shape=s, ms=1e-6, flops=f,
            config=jsonable_config(G.V9_CONFIGS[5]), swept=True, source="0123456789ab")
    assert G.tuned_config(rec, s) == G.V9_CONFIGS[2]
    assert G.tuned_config(rec.entries, list(s)) == G.V9_CONFIGS[2]        # a list of entries, a list shape
    assert G.tuned_config(rec, other) == G.V9_CONFIGS[4]
    assert [c for c, _ in G.swept(rec, s)][:2] == [G.V9_CONFIGS[2], G.V9_CONFIGS[3]]
    assert G.config_impl(G.V9_DEFAULT) == "v9_tuned[128,128,8,64,32,2,2,8]"
    # a recorded config that is no longer instantiated is ignored
    rec.add("sgemm", "v9_tuned[1,2,3]", dtype="float32", shape=s, ms=1e-6, flops=f,
            config={**jsonable_config(G.V9_DEFAULT), "bk": 4}, swept=True, source=G.v9_digest())
    assert G.tuned_config(rec, s) == G.V9_CONFIGS[2]


def test_tune_refuses_configs_it_did_not_instantiate(tmp_path):
    from utils.record import Record
    rec = Record("11-tiled-gemm", gpu="cpu-test", root=tmp_path)
    with pytest.raises(ValueError, match="not instantiated"):
        G.tune(rec, [(64, 64, 64)], configs=[G.V9(64, 64, 8, 32, 32, 2, 2, 8)])


def test_tune_times_every_config_on_every_shape_through_the_ladder(tmp_path, monkeypatch, capsys):
    """Without a GPU: the ladder's time() replaced by a fake that records what the real one would."""
    from utils.ladder import Ladder, jsonable_config
    from utils.record import Record
    rec = Record("11-tiled-gemm", gpu="cpu-test", root=tmp_path)
    calls = []

    def fake_time(self, label, shapes=None, config=None, impl=None, extra=None):
        calls.append((label, tuple(shapes[0]), config, impl))
        f = G.flops(*shapes[0])
        speed = 50.0 if config == G.V9_CONFIGS[3] else 40.0
        return [rec.add("sgemm", impl, dtype="float32", shape=shapes[0], ms=f / (speed * 1e12) * 1e3, flops=f,
                        config=jsonable_config(config), **(extra or {}))]
    monkeypatch.setattr(Ladder, "time", fake_time)
    monkeypatch.setitem(sys.modules, "tqdm", None)      # the plain progress lines
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    shapes = [(4096, 4096, 4096), (37, 199, 1823)]
    best = G.tune(rec, shapes)
    assert len(calls) == len(shapes) * len(G.V9_CONFIGS) and {c[0] for c in calls} == {"v9_tuned"}
    assert all(impl == G.config_impl(c) for _, _, c, impl in calls)
    assert best == {s: G.V9_CONFIGS[3] for s in shapes}
    assert "sgemm v9 sweep: 12/12" in capsys.readouterr().out
    assert all(e["swept"] for e in rec.entries)


def test_smem_model_matches_what_ptxas_reports_for_every_instance():
    """NVRTC on the CPU (cached builds): each instance's static shared memory is smem_bytes of its config."""
    from utils.build import compile_source
    stages = {2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 2, 8: 2, 9: 2}
    for label in TILED:
        v = G.SGEMM[label]
        comp = compile_source(v.source, arch="sm_90")
        for c in v.all_configs():
            for expr in {ln.kernel for shape in ((64, 64, 64), (3, 5, 7)) for ln in v.launches(G.shape_problem(*shape), c)}:
                got = comp.report[comp.symbols[expr]]["smem_bytes"]
                assert got == G.smem_bytes(c, stages[v.number]), (expr, got)


# --- chapter 11's experiments (kernels/sgemm/tiled.py) ------------------------------------------------------

def test_the_inner_loop_model_gives_each_rung_its_bounds():
    from kernels.sgemm import tiled as T
    assert set(T.COUNTS) == set(TILED) == set(T.TILED)
    assert T.smem_bound("v2_smem_tile") == pytest.approx(1 / 8)              # 2 words per FMA
    assert T.smem_bound("v3_reg1d") == pytest.approx(32 / (128 * 9 / 8))
    assert T.wavefront_words_per_fma("v4_reg2d") == pytest.approx(16 * 3 / 64)
    assert T.smem_bound("v5_vec4") == pytest.approx(2 / 3) and T.smem_bound("v6_swizzle") == 1.0
    assert T.issue_bound("v4_reg2d") == pytest.approx(0.8) and T.issue_bound("v5_vec4") == pytest.approx(64 / 68)
    bounds = [T.bound_tflops(lab, 66.0) for lab in TILED]
    assert bounds == sorted(bounds) and bounds[-1] == pytest.approx(66.0 * 64 / 68)
    assert [T.l2_bytes_per_fma(lab) for lab in TILED[:3]] == [0.25, 0.125, 0.0625]
    pred = T.predictions("v3_reg1d", [(64, 64, 64)], 66.0)
    assert pred == {((64, 64, 64), "float32"): pytest.approx(T.bound_tflops("v3_reg1d", 66.0))}


def test_resources_come_from_the_ptxas_report_and_the_occupancy_formula():
    from kernels.sgemm import tiled as T
    r = T.resources("v8_warptile")
    assert (r.threads, r.registers, r.smem, r.blocks, r.warps) == (256, 128, 16384, 2, 16)
    assert r.kernel == G.v8_name(G.V8_WARP, True) and T.resources("v8_warptile", vec=False).kernel.endswith("false>")
    no_hint = next(c for c in G.V9_CONFIGS if c.min_blocks == 1 and c.bk == 8)
    assert T.resources("v9_tuned", no_hint).warps == 8
    t = T.model_table(fma_tflops=66.0)
    assert t.columns[-1] == "bound TFLOP/s" and [row[0] for row in t.rows] == TILED
    c = T.config_table()
    assert len(c.rows) == len(G.V9_CONFIGS) and c.rows[0][-1] == "default" and c.rows[0][9] == "16"


def test_bank_counters_without_ncu_print_one_line(monkeypatch, capsys):
    from kernels.sgemm import tiled as T
    monkeypatch.setattr(traffic, "find_ncu", lambda env=None: None)
    assert T.bank_counters() is None
    assert capsys.readouterr().out.count("\n") == 1
    t = T.bank_table(None)
    assert [row[0] for row in t.rows] == list(T.BANK_CASES) and t.rows[0][1:3] == ["0.33", "—"]


def test_ncu_command_profiles_the_cases_warm_with_the_clocks_left_alone():
    from kernels.sgemm import tiled as T
    cmd = T.ncu_command("banks", "/tmp/r", ncu="ncu", python="py")
    assert cmd[cmd.index("--clock-control") + 1] == "none" and "--profile-from-start" in cmd
    assert cmd[-7:] == ["py", "-m", "kernels.sgemm.tiled", "banks", "2048", "2048", "2048"]
    assert all(m in cmd[cmd.index("--metrics") + 1] for m in T.BANK_METRICS.values())
    banks = T.PROFILES["banks"]
    assert [banks.case(n) for n in T.BANK_CASES] == [("v5_vec4", None), ("v6_swizzle", G.V6_CONFIGS[1]),
                                                     ("v6_swizzle", G.V6_CONFIGS[0])]
    issue = T.PROFILES["issue"]
    cmd = T.ncu_command("issue", "/tmp/r", ncu="ncu", python="py")
    assert cmd[-4:] == ["issue", "4096", "4096", "4096"] and "regex:sgemm_v[89]_" in cmd
    assert [issue.case(n) for n in issue.cases] == [("v8_warptile", None), ("v9_tuned", T.V8_ORDER)]
    # v9 on v8's tiles and v8's tile order: the comparison isolates the tile iterator
    assert (T.V8_ORDER.bm, T.V8_ORDER.bn, T.V8_ORDER.bk, T.V8_ORDER.group_m) == (128, 128, 8, 1)
    with pytest.raises(ValueError, match="unknown profiling case"):
        issue.case("v9_tuned[other]")


def test_issue_counters_table_and_ratios():
    from kernels.sgemm import tiled as T
    m = T.ISSUE_METRICS

    def launch(name, inst, busy, ns):
        return {"kernel": name, m["instructions"]: inst, m["FMA pipe"]: 2.0e9, m["issue busy (%)"]: busy,
                m["eligible warps"]: 2.5, m["duration (ns)"]: ns}
    entries = [launch("sgemm_v8_warptile<128, 128, 8, 64, 32, 2, true>", 2.6e9, 73.0, 3.4e6),
               launch("void sgemm_v9_tuned<128, 128, 8, 64, 32, 2, 2, 1, true>(int)", 2.5e9, 79.0, 3.0e6)]
    counters = T.by_case(entries, "issue")
    assert list(counters) == ["v8_warptile", T.ITER_IMPL]
    r = T.issue_ratios(counters)
    assert r["instructions"] == pytest.approx(2.5 / 2.6) and r["duration (ns)"] == pytest.approx(3.0 / 3.4)
    t = T.issue_table(counters)
    assert t.rows[0][1:] == ["2,600,000,000", "76.9%", "73.0%", "2.50", "3,400"]
    assert T.issue_table(None).rows[1][1:] == ["—"] * 5
    texts = T.issue_texts(counters)
    assert texts == {"issue_v8_busy": "73%", "issue_v8_eligible": "2.50", "issue_v9_busy": "79%",
                     "issue_v9_eligible": "2.50", "issue_fewer_inst": "3.8%", "issue_shorter": "11.8%"}
    assert set(T.issue_texts(None).values()) == {"n/a"} and set(T.issue_texts(None)) == set(texts)
    with pytest.raises(ValueError, match="expected 2 launches"):
        T.by_case(entries[:1], "issue")


def test_bank_counters_are_read_in_launch_order():
    from kernels.sgemm import tiled as T
    m = T.BANK_METRICS

    def launch(name, ld, st):
        return {"kernel": name, m["ld conflicts"]: ld, m["ld wavefronts"]: 300.0, m["st conflicts"]: st,
                m["st wavefronts"]: 200.0, m["duration (ns)"]: 2e6}
    entries = [launch("void sgemm_v5_vec4<128, 128, 8, 8, 8, true>(int, ...)", 100.0, 100.0),
               launch("sgemm_v6_swizzle<128, 128, 8, 8, 8, 1, true>", 0.0, 1.0),
               launch("sgemm_v6_swizzle<128, 128, 8, 8, 8, 2, true>", 0.0, 0.0)]
    counters = T.by_case(entries)
    assert list(counters) == list(T.BANK_CASES) and T.conflict_ratio(counters, "v5_vec4") == pytest.approx(1 / 3)
    assert T.conflict_ratio(counters, "v6_swizzle[pad]", "st") == pytest.approx(0.005)
    t = T.bank_table(counters)
    assert t.rows[0][2] == "0.333" and t.rows[0][4] == "0.500" and t.rows[2][5] == "2,000"
    with pytest.raises(ValueError, match="expected 3 launches"):
        T.by_case(entries[:2])


def swept_record(tmp_path, gpu="cpu-test", speeds=(40.0, 38.0, 30.0, 41.0, 35.0, 29.0)):
    from utils.ladder import jsonable_config
    from utils.record import Record
    rec = Record("11-tiled-gemm", gpu=gpu, root=tmp_path)
    s = (4096,) * 3
    for c, tf in zip(G.V9_CONFIGS, speeds):
        rec.add("sgemm", G.config_impl(c), dtype="float32", shape=s, ms=G.flops(*s) / (tf * 1e12) * 1e3,
                flops=G.flops(*s), config=jsonable_config(c), swept=True, source=G.v9_digest())
    return rec


def test_v9_digest_follows_the_source_and_its_headers(tmp_path, monkeypatch):
    d = G.v9_digest()
    assert len(d) == 12 and d == G.v9_digest()
    import utils.build as B
    real = B.local_includes
    extra = tmp_path / "extra.cuh"
    extra.write_text("// a changed header")
    monkeypatch.setattr(G, "local_includes", lambda p: (*real(p), extra))
    assert G.v9_digest() != d


def test_a_stored_sweep_is_carried_into_the_new_run_and_read_back(tmp_path, monkeypatch):
    from kernels.sgemm import tiled as T
    from utils.record import Record
    old = swept_record(tmp_path)
    new = Record("11-tiled-gemm", gpu="cpu-test", root=tmp_path)
    stored = T.stored_sweep(new)
    assert len(stored) == len(G.V9_CONFIGS) and stored[0]["metric"] == pytest.approx(41.0)
    monkeypatch.setattr(G, "tune", lambda *a, **k: pytest.fail("a stored table must not be swept again"))
    assert T.sweep_or_carry(new, stored=stored) == "carried"
    assert all(e["from_run"] == old.run and e["swept"] for e in new.entries)
    assert G.tuned_config(new, T.TUNE_SHAPE) == G.V9_CONFIGS[3]
    t = T.tuning_table(new)
    assert [row[-3] for row in t.rows][:2] == ["41.0", "40.0"] and t.rows[0][-2] == "100%"
    assert T.stored_sweep(Record("11-tiled-gemm", gpu="other-gpu", root=tmp_path)) == []


def test_without_a_stored_table_the_sweep_runs(tmp_path, monkeypatch):
    from kernels.sgemm import tiled as T
    from utils.record import Record
    rec = Record("11-tiled-gemm", gpu="cpu-test-none", root=tmp_path)
    calls = []
    monkeypatch.setattr(G, "tune", lambda r, shapes: calls.append(shapes))
    assert T.sweep_or_carry(rec, stored=[]) == "swept" and calls == [[T.TUNE_SHAPE]]
    with pytest.raises(LookupError, match="sweep_or_carry"):
        T.tuning_table(rec)


def test_bar_and_llm_tables_read_the_record(tmp_path):
    from kernels.sgemm import tiled as T
    shapes = [T.BAR_SHAPE, ledger.QKV, ledger.DECODE[0]]
    lad = recorded(tmp_path, {"v8_warptile": 38.0, "v9_tuned": 42.0, "cupy.matmul": 50.0, "torch.matmul": 49.0},
                   shapes)
    bar = T.bar_table(lad, T.TILED)
    assert [row[0] for row in bar.rows] == ["v8_warptile", "v9_tuned"]
    assert bar.rows[0][2:] == ["76%", "no", "no"] and bar.rows[1][2:] == ["84%", "yes", "no"]
    llm = T.llm_table(lad)
    assert [row[0] for row in llm.rows] == ["QKV projection, prefill", "QKV projection, decode M=1"]
    assert llm.rows[0][-1] == "0.84"


def test_odd_table_checks_every_version_on_every_odd_shape_and_names_the_path(tmp_path, monkeypatch):
    from kernels.sgemm import tiled as T
    from utils.ladder import Ladder
    calls = []
    monkeypatch.setattr(Ladder, "check", lambda self, label, shapes=None, config=None: calls.append((label, shapes[0])) or 1)
    lad = recorded(tmp_path, {"cupy.matmul": 50.0}, [T.BAR_SHAPE])
    t = T.odd_table(lad, ["v2_smem_tile", "v9_tuned"])
    assert len(calls) == 2 * len(ladders.ODD_SHAPES)
    path = {row[0]: row[1] for row in t.rows}
    assert path["1x4096x4096"] == "16-byte" and path["4095x4097x1023"] == "4-byte" and path["37x199x1823"] == "4-byte"
    assert all(row[2:] == ["ok", "ok"] for row in t.rows)


def test_the_padded_layout_is_checked_and_timed_under_its_own_name(tmp_path, monkeypatch):
    from kernels.sgemm import tiled as T
    from utils.ladder import Ladder
    seen = []
    monkeypatch.setattr(Ladder, "check", lambda self, label, shapes=None, config=None: seen.append(("check", config)) or 1)
    monkeypatch.setattr(Ladder, "time", lambda self, label, shapes=None, config=None, impl=None, extra=None:
                        seen.append(("time", config, impl)) or [])
    lad = recorded(tmp_path, {"cupy.matmul": 50.0}, [T.BAR_SHAPE])
    T.time_pad(lad)
    pad = G.V6(128, 128, 8, 8, 8, "pad")
    assert seen[-1] == ("time", pad, T.PAD_IMPL) and seen.count(("check", pad)) == len(ladders.ODD_SHAPES)


def test_the_ladder_table_takes_a_configs_own_impl_name(tmp_path):
    s = (2048,) * 3
    lad = recorded(tmp_path, {"v6_swizzle": 35.0, "v6_swizzle[pad]": 34.0, "cupy.matmul": 50.0, "torch.matmul": 49.0},
                   [s])
    t = lad.table(["v6_swizzle", "v6_swizzle[pad]"])
    assert [row[2] for row in t.rows] == ["v6_swizzle", "v6_swizzle[pad]"] and t.rows[1][4] == "34"
