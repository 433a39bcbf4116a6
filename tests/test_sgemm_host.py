"""Chapter 10 host side on a CPU: the SGEMM registry and its plans, ``problem``'s ValueErrors, the float64
reference, the ledger, the byte model (against a warp-by-warp count), the Nsight Compute export parser, and
the ladder's tables read from a hand-made record."""
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
    assert list(G.SGEMM) == ["v0_uncoalesced", "v1_coalesced"]
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
    for v in G.SGEMM.values():
        with pytest.raises(Unsupported, match="grid y"):
            v.launches(p)
    assert all(v.supports(G.shape_problem(1, 65535 * 32, 1)) for v in G.SGEMM.values())


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


def test_tables_keep_three_significant_digits_where_the_ladder_rounds_to_whole_tflops(tmp_path):
    s, m1 = ladders.CLAIM_SHAPE, (1, 12288, 4096)
    lad = recorded(tmp_path, {"v0_uncoalesced": 0.512, "v1_coalesced": 7.43, "cupy.matmul": 45.0, "torch.matmul": 44.0},
                   [s, m1])
    lad.predict("v0_uncoalesced", 0.507, s, "float32")
    t = ladders.table(lad, ["v0_uncoalesced", "v1_coalesced"])
    assert t.columns == ["M x N x K", "version", "µs", "TFLOP/s", "predicted", "of cupy.matmul", "of torch.matmul"]
    assert t.rows[0][1:] == ["v0_uncoalesced", f"{G.flops(*s) / 0.512e12 * 1e6:,.0f}", "0.512", "0.507", "1.1%", "1.2%"]
    assert t.rows[1][3:5] == ["7.43", ""] and len(t.rows) == 4
    summ = ladders.summary(lad)
    assert summ.columns == ["M x N x K", "v0_uncoalesced", "v1_coalesced", "cupy.matmul", "torch.matmul"]
    assert summ.rows[1] == ["1x12288x4096", "0.512", "7.43", "45", "44"]


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
