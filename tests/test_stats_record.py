import json

import pytest

from utils.record import Record, load, make_entry, markdown_table, select
from utils.stats import Timing, gbps, geomean, percentile, tflops


def test_timing_median_and_spread():
    t = Timing.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert t.ms == 3.0 and t.n == 5
    assert t.p10 == pytest.approx(1.4)
    assert t.spread > 0


def test_timing_rejects_empty_and_negative():
    with pytest.raises(ValueError):
        Timing.of([])
    with pytest.raises(ValueError, match="out of order"):
        Timing.of([1.0, -0.5])


def test_percentile_bounds():
    assert percentile([5, 1, 3], 0) == 1 and percentile([5, 1, 3], 100) == 5
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_throughput_units():
    assert gbps(4e9, 1.0) == pytest.approx(4000.0)
    assert tflops(2e12, 10.0) == pytest.approx(200.0)
    assert geomean([1, 4]) == pytest.approx(2.0)


def test_entry_metric_from_cost_model():
    e = make_entry(chapter="04", op="transpose", impl="v1", dtype="float32", shape=(8192, 8192),
                   ms=0.5, run="r", nbytes=2 * 8192 * 8192 * 4)
    assert e["metric_name"] == "GB/s"
    assert e["metric"] == pytest.approx(2 * 8192 * 8192 * 4 / 0.5e-3 / 1e9)
    f = make_entry(chapter="02", op="gemm", impl="x", dtype="bfloat16", shape=(8, 8, 8), ms=1.0,
                   run="r", flops=1e9)
    assert f["metric_name"] == "TFLOP/s" and f["metric"] == pytest.approx(1.0)
    g = make_entry(chapter="03", op="launch", impl="empty", dtype="none", shape=(1,), ms=0.002, run="r",
                   metric_name="us")
    assert g["metric"] == pytest.approx(2.0)


@pytest.mark.parametrize("kw", [dict(ms=0), dict(ms=-1.0), dict(ms=1.0, metric_name="GB/s"),
                                dict(ms=1.0, metric_name="FLOPS", nbytes=1)])
def test_entry_rejects_bad_values(kw):
    with pytest.raises(ValueError):
        make_entry(chapter="x", op="o", impl="i", dtype="f", shape=(1,), run="r", **kw)


def test_record_writes_one_file_per_notebook_and_replaces_same_key(tmp_path):
    rec = Record("04-memory", gpu="nvidia-h200", root=tmp_path)
    rec.add("transpose", "v1", dtype="float32", shape=(4, 4), ms=1.0, nbytes=128)
    rec.add("transpose", "v1", dtype="float32", shape=(4, 4), ms=0.5, nbytes=128)
    rec.add("copy", "ceiling.copy", dtype="float32", shape=(4,), ms=0.25, nbytes=128, is_peer=True)
    doc = json.loads((tmp_path / "nvidia-h200" / "04-memory.json").read_text())
    assert len(doc["entries"]) == 2 and doc["run"] == rec.run
    assert rec.get("transpose", "v1")["ms"] == 0.5
    assert rec.ratio("transpose", "v1", "ceiling.copy", over_op="copy") == pytest.approx(0.5)
    assert len(load("nvidia-h200", root=tmp_path)) == 2
    assert select(load("nvidia-h200", root=tmp_path), impl="v1", shape=(4, 4))


def test_new_run_replaces_the_file(tmp_path):
    a = Record("05-x", gpu="g", root=tmp_path)
    a.add("op", "v1", dtype="f", shape=(1,), ms=1.0, nbytes=1)
    b = Record("05-x", gpu="g", root=tmp_path)
    b.add("op", "v2", dtype="f", shape=(1,), ms=1.0, nbytes=1)
    assert [e["impl"] for e in load("g", "05-x", root=tmp_path)] == ["v2"]


def test_markdown_table_marks_peers():
    e = make_entry(chapter="c", op="o", impl="cupy.sum", dtype="float32", shape=(3, 2), ms=2.0, run="r",
                   nbytes=10, is_peer=True)
    t = markdown_table([e])
    assert "**cupy.sum** (peer)" in t and "3×2" in t


def test_results_page_lists_every_entry_with_fraction_of_copy(tmp_path):
    from utils.report import results_markdown
    rec = Record("04-memory", gpu="nvidia-h200", root=tmp_path)
    rec.add("copy", "ceiling.copy", dtype="float32", shape=(4,), ms=1.0, nbytes=1e9, is_peer=True)
    rec.add("transpose", "v8", dtype="float32", shape=(8, 8), ms=1.0, nbytes=9e8)
    page = results_markdown(tmp_path)
    assert "## nvidia-h200" in page and "| v8 |" in page and "90%" in page
