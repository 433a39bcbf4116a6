"""Chapter 8's experiments on a CPU: ledger and floor tables, the figures read off a ladder (a real
utils.ladder.Ladder whose record is filled by hand), the issue and register reports (ptxas through
NVRTC, plans on fake device arrays), the summary and its plot."""
import math

import numpy as np
import pytest

pytest.importorskip("ml_dtypes")

from kernels import fusion as F
from tests.fakes import FakeDeviceArray
from tests.test_layernorm_experiments import COPY, recorded_ladder
from utils.ladder import Case

SHAPES = {"bias_gelu": (8192, 4096), "swiglu": (8192, 11008), "add_rmsnorm": (8192, 4096), "rope": (8192, 32, 32, 128)}


def fake_case(op, shape):
    """The arrays of a ladder case of ``op`` as fake device arrays (the plans need only shapes and dtypes)."""
    def e(*s):
        return FakeDeviceArray(s, F.BF16)
    if op == "bias_gelu":
        r, c = shape
        return Case((e(r, c), e(c), e(r, c)), outputs=(2,))
    if op == "swiglu":
        r, h = shape
        return Case((e(r, 2 * h), e(r, h)), outputs=(1,))
    if op == "add_rmsnorm":
        r, d = shape
        return Case((e(r, d), e(r, d), e(d), e(r, d), e(r, d)), outputs=(3, 4))
    t, hq, hk, d = shape
    return Case((e(t, hq, d), e(t, hk, d), e(t, d // 2), e(t, d // 2), e(t, hq, d), e(t, hk, d)), outputs=(4, 5))


def op_ladder(tmp_path, op, fracs=None, shape=None):
    """A recorded ladder of ``op`` at the chapter's shape (or ``shape``), with its real peer names; ``fracs``:
    {impl: fraction of copy} put in its record; ``case`` answers with fake device arrays."""
    shape = shape or SHAPES[op]
    lad = recorded_ladder(tmp_path / op, F.REGISTRIES[op], [shape], ["bfloat16"], tuple(F.peers(op)),
                          nbytes=lambda s, dt: F.fused_bytes(op, s))
    lad.case = lambda sh, dt, fresh_for=None: (fake_case(op, tuple(sh)), None, 0)
    for impl, f in (fracs or {}).items():
        lad.put(impl, shape, "bfloat16", f, is_peer=impl in lad.peers)
    return lad


def all_timed(tmp_path, op, best=0.9):
    lad = op_ladder(tmp_path, op)
    for k, impl in enumerate([*lad.registry, *lad.peers]):
        lad.put(impl, lad.shapes[0], "bfloat16", best if k == 0 else 0.3 + 0.05 * k, is_peer=impl in lad.peers)
    return lad


# --- ledger and floor ---------------------------------------------------------------------------------

def test_ledger_table_lists_the_chain_and_states_the_prediction():
    t = F.ledger_table("bias_gelu", (8192, 4096))
    assert [r[0] for r in t.rows] == ["x + b", "gelu"] and t.rows[1][1:] == ["64.0", "64.0"]
    assert "2 kernels" in t.caption and "256 MiB" in t.caption and "predicted speedup 2.00x" in t.caption


def test_copy_floor_and_floor_table():
    fused_us, chain_us = F.copy_floor_us("swiglu", (8192, 11008), 4000.0)
    lg = F.ledger_swiglu(8192, 11008)
    assert fused_us == pytest.approx(lg["fused"] / 4e12 * 1e6)
    assert chain_us == pytest.approx(F.chain_bytes(lg) / 4e12 * 1e6)
    t = F.floor_table(SHAPES, 4000.0)
    assert [r[0] for r in t.rows] == list(SHAPES) and t.rows[1][1:] == [f"{fused_us:.1f}", f"{chain_us:.1f}"]
    assert "4000 GB/s" in t.caption


# --- figures read off one ladder --------------------------------------------------------------------------

def test_fractions_ratio_and_times(tmp_path):
    lad = op_ladder(tmp_path, "bias_gelu", {"v1_vec8": 0.6, "torch.eager": 0.3, "torch.compile": 0.5})
    assert F.fractions(lad) == pytest.approx({"v1_vec8": 0.6, "torch.eager": 0.3, "torch.compile": 0.5})
    assert F.fractions(lad, ["v1_vec8", "v2_poly"]) == pytest.approx({"v1_vec8": 0.6})
    assert F.ratio(lad, "v1_vec8", "torch.eager") == pytest.approx(2.0)
    with pytest.raises(KeyError, match="v2_poly"):
        F.ratio(lad, "v2_poly", "torch.eager")
    (us,) = F.times_us(lad, "v1_vec8")
    assert us == pytest.approx(F.fused_bytes("bias_gelu", SHAPES["bias_gelu"]) / (0.6 * COPY * 1e9) * 1e6)
    with pytest.raises(KeyError, match="v3_rows"):
        F.times_us(lad, "v3_rows")


def test_impl_figures_names_every_timed_implementation(tmp_path):
    lad = op_ladder(tmp_path, "add_rmsnorm", {"v1_vec8": 0.9, "torch.eager": 0.15, "torch.compile": 0.8,
                                              "torch.add+F.rms_norm": 0.6})
    figs = F.impl_figures(lad, ["v1_vec8", *lad.peers])
    assert set(figs) == {f"rms-{t}-{k}" for t in ("v1_vec8", "eager", "compile", "rmsop")
                         for k in ("frac", "us", "x-eager", "x-compile")}        # the CuPy route: not timed
    assert figs["rms-v1_vec8-x-eager"] == (pytest.approx(6.0), "{:.2f}")
    assert figs["rms-rmsop-frac"][0] == pytest.approx(0.6) and figs["rms-rmsop-frac"][1] == "{:.1%}"


def test_range_verdict():
    assert F.range_verdict(0.8, 0.75, 0.9) == "落在预测之内"
    assert F.range_verdict(0.92, 0.75, 0.9) == "略高于预测的上沿"
    assert F.range_verdict(0.72, 0.75, 0.9) == "略低于预测的下沿"
    assert F.range_verdict(0.5, 0.75, 0.9) == "远低于预测"


# --- instruction issue and registers ------------------------------------------------------------------------

def test_issue_table_converts_instructions_to_time():
    t = F.issue_table({"bias_gelu_v1_vec8": 30.0, "swiglu_v1_vec8": 30.0}, 1e14, 10**8)
    assert t.rows[0] == ["bias_gelu_v1_vec8", "30.0", "7.5", "30"]
    assert t.rows[1][2] == "5.0"                                      # swiglu moves 6 bytes per element
    assert "100.0 T lane-instructions/s" in t.caption


def test_sass_per_element_without_cuobjdump(monkeypatch, capsys):
    import utils.build

    def no_cuobjdump(src, kernel=None):
        raise FileNotFoundError("cuobjdump not found")
    monkeypatch.setattr(utils.build, "sass", no_cuobjdump)
    assert F.sass_per_element(["bias_gelu_v1_vec8"]) == {}
    assert "skipping the count" in capsys.readouterr().out


def test_bias_gelu_issue_reports_registers_and_bytes_in_flight(monkeypatch):
    import utils.build
    from utils.hardware import facts
    from utils.occupancy import from_function
    monkeypatch.setattr(utils.build, "sass", lambda src, kernel=None: (_ for _ in ()).throw(FileNotFoundError("x")))
    erf = F.BiasGeluRows(4, "erf")
    rep = F.bias_gelu_issue(erf, 1e14, 8192 * 4096, facts=facts("H200"))
    assert list(rep.figures) == ["v1_vec8", "v2_poly", "v3_erf_rows4", "v3_rows"]
    ptx = F.SOURCE.ptxas()
    blocks = from_function(ptx["bias_gelu_v1_vec8"], F.THREADS, 0, facts("H200")).blocks
    ipe, kb = rep.figures["v1_vec8"]
    assert math.isnan(ipe) and kb == pytest.approx(blocks * F.THREADS * 16 * 2 / 1024)
    erf_blocks = from_function(ptx[F.BIAS_GELU_ROWS_KERNELS[erf]], F.THREADS, 0, facts("H200")).blocks
    assert rep.figures["v3_erf_rows4"][1] == pytest.approx(erf_blocks * F.THREADS * 32 * 2 / 1024)
    assert rep.table.rows[0][3] == str(ptx["bias_gelu_v1_vec8"]["registers"])


def test_register_report_covers_every_version_as_launched(tmp_path):
    from utils.hardware import facts
    ladders = {op: op_ladder(tmp_path, op) for op in SHAPES}
    ladders["add_rmsnorm"] = op_ladder(tmp_path, "add_rmsnorm", shape=(37, 1024))     # 64 threads per row
    regs = F.register_report(ladders, facts=facts("H200"))
    kernels = ["bias_gelu_v1_vec8", "bias_gelu_v2_poly", F.BIAS_GELU_ROWS_KERNELS[F.BIAS_GELU_V3], "swiglu_v1_vec8",
               "add_rmsnorm_v1_vec8", "rope_neox_v1_vec8", "rope_neox_v2_tok"]
    assert list(regs.threads) == kernels and list(regs.blocks) == kernels
    bx, by = F.rope_v2_block(64)
    assert regs.threads["rope_neox_v2_tok"] == bx * by and regs.threads["add_rmsnorm_v1_vec8"] == 64
    assert all(b >= 1 for b in regs.blocks.values()) and len(regs.table.rows) == len(kernels)


# --- the GEMM + epilogue, the summary -------------------------------------------------------------------------

def test_time_mlp_up_reads_the_record(tmp_path, monkeypatch):
    import sys
    import types

    from utils.record import Record
    rec = Record("test", gpu="fake", root=tmp_path)

    def fake_record(rec, M, N, K, seed):
        for impl, us in zip(F.MLP_IMPLS, (400.0, 440.0, 520.0)):
            rec.add("mlp_up", impl, dtype="bfloat16", shape=(M, N, K), ms=us / 1e3, flops=2.0 * M * N * K)
    monkeypatch.setattr(F, "_record_mlp_up", fake_record)
    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    fake_cupy = types.SimpleNamespace(get_default_memory_pool=lambda: pool)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    mlp = F.time_mlp_up(rec, 128, 256, 64)
    assert mlp.us == pytest.approx(dict(zip(F.MLP_IMPLS, (400.0, 440.0, 520.0))))
    assert mlp.tflops == pytest.approx(2.0 * 128 * 256 * 64 / 400e-6 / 1e12)
    assert mlp.table.rows[1] == ["cupy.matmul+bias_gelu_v3", "440.0", "+10%"]


def test_summary_reads_each_ops_fastest_version(tmp_path):
    ladders = {op: all_timed(tmp_path, op) for op in SHAPES}
    ladders["rope"].put("v2_tok", SHAPES["rope"], "bfloat16", 0.95)
    summ = F.summary(ladders, COPY, {op: 10.0 for op in SHAPES})
    assert summ.verdict["rope"]["best"] == "v2_tok" and summ.verdict["swiglu"]["best"] == "v1_vec8"
    v = summ.verdict["bias_gelu"]
    pred = F.predicted_speedup(F.ledger_bias_gelu(*SHAPES["bias_gelu"]))
    assert v["frac"] == pytest.approx(0.9)
    assert v["ratio"] == pytest.approx(0.9 / 0.45 / pred)      # torch.eager was put at 0.45
    floor = F.copy_floor_us("bias_gelu", SHAPES["bias_gelu"], COPY)[0]
    assert v["excess"] == pytest.approx(floor / 0.9 - floor)
    assert len(summ.table.rows) == 4 and summ.table.rows[0][-1] == "10.0 s"


def test_plot_ladders_draws_one_panel_per_op(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ladders = {op: all_timed(tmp_path, op) for op in SHAPES}
    fig = F.plot_ladders(ladders)
    assert len([a for a in fig.axes if a.get_visible()]) == len(SHAPES)
    plt.close("all")


def test_ladder_is_built_on_the_ops_registry_and_peers():
    lad = F.ladder(None, "rope", SHAPES["rope"], [(3, 2, 1, 1024)], seed=83, compile_seconds={})
    assert lad.registry is F.ROPE and lad.shapes == [SHAPES["rope"]] and lad.dtypes == ["bfloat16"]
    assert list(lad.peers) == ["torch.eager", "torch.compile", "cupy.ElementwiseKernel"]
    assert lad.cost(SHAPES["rope"], np.dtype(F.BF16)) == {"nbytes": F.fused_bytes("rope", SHAPES["rope"])}
    with pytest.raises(ValueError, match="expected one of"):
        F.ladder(None, "gelu", (1, 1))
