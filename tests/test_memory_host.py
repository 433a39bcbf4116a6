"""Chapter 4's microbenchmark readings on a CPU: tables, descriptions, the stride and chase readings, the
chapter 2 record loader and the plots' size."""
import json

import numpy as np
import pytest

from kernels import memory as M

DEV = {"sms": 132, "regs_per_sm": 65536, "smem_per_sm": 233472, "smem_per_block_optin": 232448,
       "l2_bytes": 60 << 20, "memory_bytes": 140 << 30}


def test_levels_and_bank_tables():
    t = M.levels_table(DEV, {"hbm_tbps": 4.8})
    assert t.column("capacity") == ["256 KiB per SM (65536 x 32 bit)", "228 KiB per SM, 227 KiB per block (opt-in)",
                                    "60 MiB", "140 GiB, datasheet 4.8 TB/s"]
    b = M.bank_table()
    assert b.column("ways") == ["1", "32", "1", "1"] and b.rows[1][1] == "[0, 0, 0, 0, 0, 0, 0, 0]"


def test_chase_and_plateau_descriptions():
    ns = {16 << 10: 20.2, 48 << 20: 268.8, 1 << 30: 353.0}
    assert M.describe_chase(ns, 1.98e9).splitlines() == ["  16 KiB:   20.2 ns per load (   40 cycles)",
                                                         "  48 MiB:  268.8 ns per load (  532 cycles)",
                                                         "   1 GiB:  353.0 ns per load (  699 cycles)"]
    lat = {"L1": 20.0, "L2": 140.0, "HBM": 350.0}
    lines = M.describe_plateaus(lat, {"L1": 17.5, "L2": 125.0, "HBM": 325.0}, 2.0e9).splitlines()
    assert lines[0] == " L1 plateau:   20.0 ns =   40 cycles at 2.00 GHz; measured / predicted = 1.14"
    assert lines[-1] == "L2 is 7.0x the L1 latency, HBM 2.5x the L2 latency."


def test_stride_readings():
    # the H200 run: 32-byte model up to stride 8, the 64-byte one from 16, below even that at 64
    frac = {1: 0.973, 2: 0.677, 4: 0.413, 8: 0.232, 16: 0.123, 32: 0.104, 64: 0.077}
    r = M.read_strides(frac)
    assert r.err64 < r.err32 and r.below64 == 64
    assert "64-byte model" in r.describe() and "At stride 64 and beyond" in r.describe()
    sectors = {s: M.strided_model(s) for s in frac}
    r32 = M.read_strides(sectors)
    assert r32.err32 == 0 and r32.below64 is None and "32-byte sector model" in r32.describe()
    assert "\n" not in r32.describe()
    assert M.describe_strides({2: 0.677}) == "stride  2:  67.7% of copy; 32-byte model  66.7% (measured / model = 1.02)"
    with pytest.raises(ValueError, match="16 or more"):
        M.read_strides({1: 1.0, 8: 0.22})


def test_copy_width_and_smem_tables():
    def e(impl, ms, metric):
        return {"impl": impl, "ms": ms, "metric": metric}
    t = M.copy_width_table([e("ceiling.copy", 0.5, 4000.0), e("copy_f1", 0.8, 2800.0), e("copy_f4", 0.5, 4000.0)],
                           4000.0, {1: 0.70, 4: 0.97})
    assert t.rows[0][3:] == ["100.0%", "", ""]
    assert t.rows[1][3:] == ["70.0%", "70%", "1.00"] and t.rows[2][-1] == f"{1 / 0.97:.2f}"
    assert M.smem_instructions_per_sm("col", 1056, 132, 256) == 8 * 8 * 256 * 32
    assert M.smem_instructions_per_sm("row_vec4", 1056, 132, 256) == 8 * 8 * 256 * 8
    clk, blocks, reps = 2.0e9, 1056, 256
    col_ms = M.smem_instructions_per_sm("col", blocks, 132, reps) * 32 / clk * 1e3   # 32 clocks per instruction
    s = M.smem_table({"col": e("col", col_ms, 1043.0)}, 33454.0, clk, blocks, 132, reps)
    assert s.rows[0][3] == "3.1%" and s.rows[0][4] == "32.0"


def test_chapter2_l2_fall_reads_the_stored_record(tmp_path):
    assert M.chapter2_l2_fall("gpu-x", 60 << 20, root=tmp_path) is None
    pts = [(4, 9600), (20, 9000), (28, 9100), (44, 8000), (60, 8300), (72, 7300), (256, 5000)]
    entries = [{"chapter": "02", "op": "l2_bw", "impl": "l2_read", "is_peer": False, "dtype": "uint32",
                "shape": [1], "ms": 1.0, "metric_name": "GB/s", "metric": g, "run": "r", "working_set_mib": w}
               for w, g in pts]
    entries.append(dict(entries[0], impl="other", metric=1.0))
    (tmp_path / "gpu-x").mkdir()
    (tmp_path / "gpu-x" / "02-hopper-architecture.json").write_text(json.dumps({"entries": entries}))
    fall = M.chapter2_l2_fall("gpu-x", 60 << 20, root=tmp_path)
    assert fall.plateau_gbps == 9100 and fall.first_beyond_mib == 72
    assert M.describe_l2_fall(fall) == ("chapter 2's L2 read sweep: plateau 9100 GB/s; lowest point up to the L2 "
                                        "size 88% of it (44 MiB); first point past the L2 80% (72 MiB)")


def test_plots_fit_the_column():
    import matplotlib
    matplotlib.use("Agg")
    from utils.plot import COLUMN_IN
    frac = {s: M.strided_model(s, 64) * 0.95 for s in (1, 2, 4, 8, 16, 32, 64)}
    for fig in (M.plot_strided(frac), M.plot_chase({16 << 10: 20.0, 1 << 30: 350.0}, 60 << 20)):
        assert len(fig.axes) == 1 and fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
    assert np.allclose(fig.axes[0].lines[0].get_ydata(), [20.0, 350.0])
