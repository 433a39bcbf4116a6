"""Chapter 9's experiments and figures on a CPU: the ledger, the time-vs-bytes line, what the INT8/FP8 timing
records, the format errors, the conversion table, the occupancy line, the readers of the two ladders and the
plots. Record entries are made with utils.record.Record in a temporary directory; nothing here needs a GPU."""
import types

import ml_dtypes
import numpy as np
import pytest

from kernels import quant as Q
from kernels.quant import experiments as E
from kernels.quant import ladders
from tests.fakes import FakeDeviceArray
from utils.ladder import Case
from utils.record import Record

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def rec(tmp_path):
    return Record("09-quantization", gpu="test-gpu", root=tmp_path)


def add(rec, op, impl, shape, us, *, nbytes=None, flops=None, is_peer=False, metric_name=None):
    return rec.add(op, impl, dtype="bfloat16", shape=shape, ms=us / 1e3, nbytes=nbytes, flops=flops,
                   is_peer=is_peer, metric_name=metric_name)


# --- the ledger and the line -------------------------------------------------------------------------

def test_ledger_table_gives_bytes_intensity_and_floor():
    t = E.ledger_table(8192, 8192, copy_gbps=4000.0, hbm_tbps=4.8)
    assert t.columns[0] == "GEMV 1 x 8192 x 8192" and [r[0] for r in t.rows] == ["bf16 weights", "INT4 g128 weights"]
    b16, b4 = Q.gemv_bf16_nbytes(8192, 8192), Q.gemv_nbytes(8192, 8192)
    assert t.rows[0][1] == f"{b16 / 1e6:.1f} MB" and t.rows[1][1] == f"{b4 / 1e6:.1f} MB"
    assert t.rows[0][2] == "1.00" and t.rows[1][2] == f"{2 * 8192 * 8192 / b4:.2f}"
    assert t.rows[1][3] == f"{b4 / 4000.0 / 1e3:.1f} µs"
    assert "4000 GB/s (83% of the 4.8 TB/s" in t.caption


def test_fit_line_recovers_intercept_and_bandwidth():
    nbytes = np.array([1e6, 4e6, 16e6, 64e6])
    us = 3.0 + nbytes / 4000.0 / 1e3                  # 3 us + bytes at 4000 GB/s
    line = E.fit_line(nbytes, us)
    assert line.fixed_us == pytest.approx(3.0) and line.gbps == pytest.approx(4000.0)
    assert line.us(8e6) == pytest.approx(3.0 + 2.0)
    assert str(line) == "3.0 us + bytes / 4.00 TB/s"
    assert E.fit_line(*zip(*[(1e6, 4.0), (2e6, 5.0)])).gbps == pytest.approx(1000.0)   # pairs, as the notebook passes
    with pytest.raises(ValueError, match="two or more"):
        E.fit_line([1e6], [2.0])
    with pytest.raises(ValueError, match="does not grow"):
        E.fit_line([1e6, 2e6], [5.0, 4.0])


# --- INT8 / FP8 -------------------------------------------------------------------------------------

def test_round_trip_records_the_chapter_entries_in_order():
    got = [(m["op"], m["impl"], m["dtype"], m["is_peer"]) for m in E.round_trip_entries("int8", (8192, 8192))]
    assert got == [("int8_quant", "int8_quant_rowwise", "bfloat16", False),
                   ("int8_quant", "torch.eager_ops", "bfloat16", True),
                   ("int8_dequant", "int8_dequant_rowwise", "int8", False),
                   ("int8_dequant", "torch.eager_ops", "int8", True)]
    assert [m["nbytes"] for m in E.round_trip_entries("int8", (64, 32))] == \
        [Q.int8_quant_nbytes(64, 32)] * 2 + [Q.int8_dequant_nbytes(64, 32)] * 2
    fp8 = E.round_trip_entries("fp8", (3, 5, 9))
    assert [(m["op"], m["impl"], m["dtype"]) for m in fp8] == [
        ("fp8_quant", "fp8_quant", "bfloat16"), ("fp8_quant", "torch.eager_ops", "bfloat16"),
        ("fp8_dequant", "fp8_dequant", "fp8_e4m3"), ("fp8_dequant", "torch.eager_ops", "fp8_e4m3")]
    assert [m["nbytes"] for m in fp8] == [Q.fp8_quant_nbytes(135)] * 2 + [Q.fp8_dequant_nbytes(135)] * 2
    with pytest.raises(ValueError, match="unknown format"):
        E.round_trip_entries("int4", (8, 8))


def test_streaming_table_sets_ours_beside_copy_prediction_and_peer():
    ours = {"op": "int8_quant", "impl": "int8_quant_rowwise", "ms": 0.1, "metric": 3000.0}
    peer = {"op": "int8_quant", "impl": "torch.eager_ops", "ms": 0.9, "metric": 333.0}
    t = E.streaming_table([(ours, peer)], copy_gbps=4000.0, predicted={"int8_quant_rowwise": 0.8})
    assert t.rows == [["int8_quant", "int8_quant_rowwise", "100.0", "3000", "75%", "80%", "0.94", "900.0", "9.0x"]]
    assert "torch.eager_ops µs" in t.columns


def test_format_errors_match_the_chapter_predictions_and_order():
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((512, 256)) * 0.02).astype(np.float32).astype(BF16)
    errors = E.format_errors(w)
    assert list(errors) == ["int8 per-channel", "fp8 e4m3 per-tensor", "int4 g128 asymmetric"]
    (b8, e8), (bf, ef), (b4, e4) = errors.values()
    assert b8 == bf == 8 and b4 == pytest.approx(4 + 20 / 128)
    assert e8 < ef < e4
    for err, pred in ((e8, 0.009), (ef, 0.025), (e4, 0.10)):
        assert 0.6 < err / pred < 1.4, (err, pred)
    t = E.error_table(errors, {"int8 per-channel": 0.009, "fp8 e4m3 per-tensor": 0.025, "int4 g128 asymmetric": 0.1})
    assert t.rows[2][:2] == ["int4 g128 asymmetric", "4.16"] and t.rows[0][3] == "0.9%"


def test_int8_errors_are_per_output_channel():
    """One column of W scaled up must not coarsen the other columns' INT8 steps (one scale per channel n)."""
    rng = np.random.default_rng(9)
    w = (rng.standard_normal((256, 64)) * 0.02).astype(np.float32)
    loud = w.copy()
    loud[:, 0] *= 100
    quiet = E.format_errors(w[:, 1:].astype(BF16))["int8 per-channel"][1]
    mixed = Q.int8_dequant_reference(*Q.int8_reference(loud.astype(BF16).astype(np.float32).T.copy())).T
    ref = loud.astype(BF16).astype(np.float32)
    err_rest = np.linalg.norm(mixed[:, 1:] - ref[:, 1:]) / np.linalg.norm(ref[:, 1:])
    assert err_rest == pytest.approx(quiet, rel=1e-6)


# --- the conversion rate ----------------------------------------------------------------------------

def test_convert_rate_and_table(rec):
    assert E.convert_threads(132) == 132 * 2048 * 4
    # 132 SMs at 1 GHz converting 132e9 nibbles in 1 s: one nibble per clock per SM
    assert E.nibbles_per_clock(132 * 10**9, 1000.0, 132, 1e9) == pytest.approx(1.0)
    per_clk = {"v0_naive": 16.0, "v1_magic": 30.0, "v2_magic_interleaved": 40.0, "v3_magic_fp16": 48.0}
    for lab, us in zip(per_clk, (400, 210, 160, 130)):
        add(rec, "int4_convert", lab, (1024,), us, metric_name="us")
    t = E.convert_table(rec, per_clk, {"v0_naive": 16, "v1_magic": 36, "v2_magic_interleaved": 50,
                                       "v3_magic_fp16": 60})
    assert [r[0] for r in t.rows] == list(Q.CONVERT)
    assert t.rows[0][1:] == ["400", "16.0", "16", "1.00x"] and t.rows[3][4] == "3.00x"


# --- GEMV v1's occupancy line -----------------------------------------------------------------------

def test_gemv_v1_occupancy_line(monkeypatch):
    K, N = 8192, 8192
    args = (FakeDeviceArray((1, K), BF16), FakeDeviceArray((K // 8, N), np.int32),
            FakeDeviceArray((K // 128, N // 8), np.int32), FakeDeviceArray((K // 128, N), BF16),
            FakeDeviceArray((1, N), BF16))
    fake = types.SimpleNamespace(registry=Q.GEMV, case=lambda shape, dtype: (Case(args, outputs=(4,)), None, 0))
    monkeypatch.setattr(Q, "kernel_report", lambda: {"w4a16_gemv_v1_magic": {"registers": 64}})
    line = E.gemv_v1_occupancy(fake, (1, K, N), sms=132)
    # 64 registers x 256 threads: 4 blocks per SM by the register file; 256 blocks of 32 columns
    assert line == ("w4a16_gemv_v1_magic: 64 registers -> 4 blocks of 256 per SM (limited by registers); "
                    f"grid 256 blocks -> {256 / (4 * 132):.2f} waves")


# --- reading the ladders back -----------------------------------------------------------------------

GEMV_SHAPES = [(1, 8192, 8192), (1, 4096, 4096)]


def gemv_record(rec):
    for s, v1, cub in zip(GEMV_SHAPES, (30.0, 12.0), (60.0, 20.0)):
        nb = Q.gemv_nbytes(s[1], s[2])
        add(rec, "w4a16_gemv", "v0_naive", s, 80.0, nbytes=nb)
        add(rec, "w4a16_gemv", "v1_magic", s, v1, nbytes=nb)
        add(rec, "w4a16_gemv", "cublas_bf16", s, cub, nbytes=nb, is_peer=True)
        add(rec, "w4a16_gemv", "torch_int4pack_mm", s, 2 * v1, nbytes=nb, is_peer=True)
    return ladders.gemv_ladder(rec, GEMV_SHAPES[:1])


def test_us_reads_any_shape_of_the_op(rec):
    gemv = gemv_record(rec)
    assert ladders.us(gemv, "v1_magic", (1, 8192, 8192)) == pytest.approx(30.0)
    assert ladders.us(gemv, "cublas_bf16", (1, 4096, 4096)) == pytest.approx(20.0)   # not one of its shapes
    with pytest.raises(KeyError, match="v2_pipelined on 1x8192x8192"):
        ladders.us(gemv, "v2_pipelined", (1, 8192, 8192))


def test_time_vs_bytes_points_are_ledger_bytes_sorted(rec):
    gemv = gemv_record(rec)
    pts = ladders.time_vs_bytes(gemv, ["v1_magic", "cublas_bf16"], GEMV_SHAPES)
    assert pts["v1_magic"] == [(Q.gemv_nbytes(4096, 4096), pytest.approx(12.0)),
                               (Q.gemv_nbytes(8192, 8192), pytest.approx(30.0))]
    assert [b for b, _ in pts["cublas_bf16"]] == [b for b, _ in pts["v1_magic"]]


def test_read_rows(rec):
    gemv = gemv_record(rec)
    t, of_read, vs_cub = ladders.read_rows(gemv, "v1_magic", {(1, 8192, 8192): 24.0, (1, 4096, 4096): 9.0})
    assert of_read[1, 8192, 8192] == pytest.approx(0.8) and vs_cub[1, 4096, 4096] == pytest.approx(20 / 12)
    assert t.rows[0] == ["1x8192x8192", "24.0", "80%", "2.00x"] and t.columns[2] == "v1_magic of read"


def test_bars_table_and_roofline_points(rec):
    K, N = 8192, 8192
    gemv = gemv_record(rec)
    shapes = [(16, K, N), (32, K, N)]
    for s, (v1, v2, cub, tg) in zip(shapes, ((100.0, 50.0, 90.0, 120.0), (110.0, 70.0, 95.0, 150.0))):
        nb = Q.gemm_nbytes(*s)
        for impl, us, peer in (("v1_mma", v1, False), ("v2_marlin", v2, False), ("cublas_bf16", cub, True),
                               ("torch_int4pack_mm", tg, True)):
            add(rec, "w4a16_gemm", impl, s, us, nbytes=nb, is_peer=peer)
    gemm = ladders.gemm_ladder(rec, shapes)
    t, x = ladders.bars_table(gemm, shapes, {16: 2.2, 32: 1.8})
    assert x[16, K, N] == pytest.approx(90 / 50) and x[32, K, N] == pytest.approx(95 / 70)
    assert t.rows[0] == ["16x8192x8192", "v2_marlin", "1.80x", "2.2x"]
    pts = ladders.roofline_points([(gemv, 1), (gemm, 16), (gemm, 32)], K, N)
    assert [p["impl"] for p in pts[:3]] == ["M=1: v1_magic", "M=1: cublas_bf16", "M=1: torch_int4pack_mm"]
    assert pts[3]["impl"] == "M=16: v2_marlin" and all(p["op"] == "w4a16" for p in pts)
    assert pts[4]["bytes"] == Q.gemm_bf16_nbytes(16, K, N) and pts[3]["bytes"] == Q.gemm_nbytes(16, K, N)
    assert pts[3]["flops"] == 2.0 * 16 * K * N and pts[3]["ms"] == pytest.approx(0.05)
    assert [p["series"] for p in pts[3:6]] == ["ours (fastest version)", "cublas_bf16 (peer)",
                                               "torch_int4pack_mm (peer)"]
    assert {p["tag"] for p in pts[3:6]} == {"M=16"}


# --- the figures ------------------------------------------------------------------------------------

def test_plots_are_drawn_at_the_column_width(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kernels.quant import figures as F
    from utils.plot import COLUMN_IN
    moved = np.array([1e6, 4e6, 16e6, 64e6])
    us = 3.0 + moved / 4e6
    figs = [F.plot_bf16_magic(q=11), F.plot_fragment_order(lanes=(0, 5)),
            F.plot_time_vs_bytes(moved, us, fit=E.fit_line(moved, us), marks={"INT4 GEMV": 35e6}, title="t"),
            F.plot_time_vs_bytes(moved, us, series={"v1_magic": [(1e6, 9.0), (35e6, 20.0)],
                                                    "cublas_bf16": [(1e6, 12.0), (35e6, 40.0)]},
                                 peers=["cublas_bf16"], limit_mb=130)]
    for k, fig in enumerate(figs):
        assert fig.get_size_inches()[0] == pytest.approx(COLUMN_IN)
        fig.savefig(tmp_path / f"f{k}.png")
    lines = {ln.get_label(): ln for ln in figs[3].axes[0].get_lines()}
    assert lines["cublas_bf16"].get_linestyle() == "--" and lines["v1_magic"].get_linestyle() == "-"
    assert figs[3].axes[0].get_xlim() == (0, 130)
    assert len(figs[1].axes) == 2
    for fig in figs:
        plt.close(fig)
