"""The version model (utils.version), the ladder harness's pure parts (utils.ladder), tables and prose."""
import dataclasses

import numpy as np
import pytest

from utils.ladder import Case, Ladder, case_seed, shape_name
from utils.prose import JudgementFailed, Text, expect, glue, glued
from utils.table import Table
from utils.version import Launch, Registry, Unsupported, Version, Workspace, config_type


@dataclasses.dataclass(frozen=True)
class FakeSource:
    file: str = "fake.cu"
    requires: tuple = ()


@dataclasses.dataclass
class Problem:
    n: int
    out: object = None


Cfg = config_type("Cfg", "threads items")


def plan_block(problem, cfg):
    per_block = cfg.threads * cfg.items
    if problem.n > 1 << 20:
        raise Unsupported(f"at most {1 << 20} elements, got {problem.n}")
    return [Launch("op_v1_block", (-(-problem.n // per_block), 1, 1), (cfg.threads, 1, 1), args=(problem.n,))]


def make_registry():
    v0 = Version("op_v0_naive", "one thread per element", FakeSource(),
                 lambda p, c: [Launch("op_v0_naive", (p.n, 1, 1), (1, 1, 1), args=(Workspace((p.n,)),))])
    v1 = Version("op_v1_block", "a block walks items per thread", FakeSource(requires=("clusters",)), plan_block,
                 parent="v0_naive", snippet="op_v1", configs=(Cfg(128, 4), Cfg(256, 8)),
                 default=lambda p: Cfg(256, 8))
    return Registry("op", lambda n: Problem(n), [v0, v1])


def test_names_are_parsed_and_enforced():
    reg = make_registry()
    v = reg["v1_block"]
    assert (v.op, v.number, v.idea, v.label) == ("op", 1, "block", "v1_block")
    assert reg[1] is v and reg["op_v1_block"] is v
    with pytest.raises(ValueError, match="<op>_v<N>_<idea>"):
        Version("w4a16_mma_m16", "x", FakeSource(), plan_block)
    with pytest.raises(KeyError, match="has no version"):
        reg["v7_nothing"]


def test_registry_refuses_foreign_ops_duplicates_and_unknown_parents():
    reg = make_registry()
    v0, v1 = reg["v0_naive"], reg["v1_block"]
    with pytest.raises(ValueError, match="not a version of"):
        Registry("other", Problem, [v0])
    with pytest.raises(ValueError, match="appears twice"):
        Registry("op", Problem, [v0, dataclasses.replace(v0, name="op_v0_again")])
    with pytest.raises(ValueError, match="parent"):
        Registry("op", Problem, [v1])          # its parent v0 is not earlier in the registry


def test_plans_configs_and_support():
    reg = make_registry()
    v = reg["v1_block"]
    p = v.validate(5000)
    (ln,) = v.launches(p)
    assert ln.grid == (-(-5000 // 2048), 1, 1) and ln.block == (256, 1, 1)
    (ln,) = v.launches(p, Cfg(128, 4))
    assert ln.grid == (-(-5000 // 512), 1, 1)
    with pytest.raises(ValueError, match="not instantiated"):
        v.launches(p, Cfg(64, 4))
    assert v.supports(p)
    big = v.validate(1 << 21)
    assert not v.supports(big) and "at most" in v.why_not(big)
    assert v.requires == ("clusters",)
    assert [x.label for x in reg.lineage("v1_block")] == ["v0_naive", "v1_block"]


def test_launch_rejects_bad_geometry():
    with pytest.raises(ValueError, match="grid"):
        Launch("k", (0, 1, 1), (32, 1, 1))
    with pytest.raises(ValueError, match="block"):
        Launch("k", (1, 1, 1), (32, 1))
    assert Launch("k", (2, 3, 1), (32, 2, 1)).threads == 64


def test_config_names_its_fields():
    assert repr(Cfg(4, 8)) == "Cfg(threads=4, items=8)"


def test_case_seed_is_stable_and_distinguishes_cases():
    a = case_seed(0, "v1", (37, 7), "float32")
    assert a == case_seed(0, "v1", (37, 7), "float32")
    assert len({a, case_seed(1, "v1", (37, 7), "float32"), case_seed(0, "v2", (37, 7), "float32"),
                case_seed(0, "v1", (37, 8), "float32"), case_seed(0, "v1", (37, 7), "bfloat16")}) == 5
    assert shape_name((1823, 781)) == "1823x781"


class FakeRecord:
    def __init__(self):
        self.entries = []

    def find(self, op=None, impl=None, **match):
        from utils.record import select
        return select(self.entries, op=op, impl=impl, **match)


def entry(impl, shape, dtype, metric, peer=False):
    return dict(op="op", impl=impl, dtype=dtype, shape=list(shape), ms=1.0, metric=metric, metric_name="GB/s",
                is_peer=peer)


def test_ladder_tables_read_the_record():
    rec = FakeRecord()
    lad = Ladder(rec, make_registry(), shapes=[(1024,)], dtypes=["float32"], make=lambda s, d, r: Case((None,)),
                 reference=lambda c: None, nbytes=lambda s, d: 8 * s[0], peers={"peer.op": None}, ceiling=None)
    rec.entries += [entry("v0_naive", (1024,), "float32", 100.0), entry("v1_block", (1024,), "float32", 300.0),
                    entry("peer.op", (1024,), "float32", 200.0, peer=True)]
    assert lad.ratio("v1_block", "peer.op", (1024,), "float32") == pytest.approx(1.5)
    assert lad.best((1024,), "float32") == "v1_block"
    t = lad.table(["v0_naive", "v1_block"])
    assert t.column("vs peer.op") == ["0.50x", "1.50x"]
    s = lad.summary()
    assert s.columns == ["shape", "dtype", "v0_naive", "v1_block", "peer.op"]
    assert s.rows == [["1024", "float32", "100", "300", "200"]]


def test_ladder_needs_a_cost_model_and_a_known_ceiling():
    with pytest.raises(ValueError, match="cost model"):
        Ladder(None, make_registry(), shapes=[], dtypes=[], make=None, reference=None)
    with pytest.raises(ValueError, match="ceiling"):
        Ladder(None, make_registry(), shapes=[], dtypes=[], make=None, reference=None, nbytes=len, ceiling="l2")


def test_case_out_picks_the_outputs():
    x, y, z = np.zeros(1), np.ones(1), np.full(1, 2.0)
    assert Case((x, y)).out is y
    assert Case((x, y, z), outputs=(1, 2)).out == (y, z)


def test_table_renders_html_and_markdown_and_checks_widths():
    t = Table(["a", "b"], [["x<y", 1.5], ["p|q", None]], caption="cap")
    html = t._repr_html_()
    assert "<table" in html and "x&lt;y" in html and "<caption>cap</caption>" in html
    md = t._repr_markdown_()
    assert "| a | b |" in md and "p\\|q" in md and "|:---|---:|" in md
    with pytest.raises(ValueError, match="expected 2"):
        Table(["a", "b"], [[1]])


def test_glue_formats_and_expect_raises_with_the_sentence(monkeypatch):
    monkeypatch.setattr("utils.prose.on_book_gpu", lambda: True)
    assert glue("v1_frac", 0.8512, "{:.0%}") is None     # a cell ending in glue shows nothing
    assert glued("v1_frac") == "85%"
    assert repr(Text("85%")) == "85%"
    with pytest.raises(ValueError, match="glue name"):
        glue("bad name", 1)
    expect(2 > 1, "two beats one")
    with pytest.raises(JudgementFailed, match="v9 misses its prediction"):
        expect(False, "v9 misses its prediction")


def test_glue_output_is_what_myst_nb_reads():
    """The display data utils.prose.glue emits is found by myst-nb's own glue reader."""
    from myst_nb.ext.glue import extract_glue_data_cell
    from nbformat.v4 import new_code_cell, new_output

    from utils.prose import GLUE_PREFIX
    out = new_output("display_data", data={GLUE_PREFIX + "text/plain": "85%"},
                     metadata={"scrapbook": {"name": "v1_frac", "mime_prefix": GLUE_PREFIX}})
    cell = new_code_cell("glue(...)", outputs=[out])
    ((key, data),) = extract_glue_data_cell(cell)
    assert key == "v1_frac" and data["data"] == {"text/plain": "85%"}
    assert cell.outputs == []           # hidden from the cell's visible output


def test_expect_only_notes_a_failed_judgement_on_another_gpu(monkeypatch, capsys):
    monkeypatch.setattr("utils.prose.on_book_gpu", lambda: False)
    expect(False, "v9 misses its prediction")
    assert "on this GPU it does not hold" in capsys.readouterr().out


def test_expect_notes_instead_of_raising_under_emulation(monkeypatch):
    import utils.gpu
    from utils.prose import on_book_gpu
    monkeypatch.setattr(utils.gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(utils.gpu, "device_summary", lambda: {"name": "NVIDIA H200", "emulated_arch": None})
    assert on_book_gpu()
    monkeypatch.setattr(utils.gpu, "device_summary", lambda: {"name": "NVIDIA H200", "emulated_arch": "sm_80"})
    assert not on_book_gpu()
    monkeypatch.setattr(utils.gpu, "device_summary", lambda: {"name": "NVIDIA A100-SXM4-80GB", "emulated_arch": None})
    assert not on_book_gpu()


def test_configs_are_recorded_as_json_whether_named_tuples_or_dataclasses():
    import json

    from utils.ladder import jsonable_config

    @dataclasses.dataclass(frozen=True)
    class Layout:
        tpr: int
        threads: int
    assert json.dumps(jsonable_config(Cfg(4, np.int64(8)))) == '{"threads": 4, "items": 8}'
    assert json.dumps(jsonable_config(Layout(2, 256))) == '{"tpr": 2, "threads": 256}'


def test_ladder_plot_draws_one_panel_per_shape_and_dtype_with_peers_in_grey():
    import matplotlib
    matplotlib.use("Agg")
    from utils.plot import PEER_COLORS, VERSION_COLORS
    rec = FakeRecord()
    shapes, dtypes = [(1024,), (4096,), (16384,)], ["float32", "bfloat16"]
    lad = Ladder(rec, make_registry(), shapes=shapes, dtypes=dtypes, make=lambda s, d, r: Case((None,)),
                 reference=lambda c: None, nbytes=lambda s, d: 8 * s[0], peers={"peer.op": None}, ceiling=None)
    for sh in shapes:
        for dn in dtypes:
            rec.entries += [entry("v0_naive", sh, dn, 100.0), entry("v1_block", sh, dn, 300.0),
                            entry("peer.op", sh, dn, 200.0, peer=True)]
    ax = lad.plot(title="t")
    fig = ax.figure
    panels = [a for a in fig.axes if a.get_visible()]
    assert len(panels) == 6                                    # small multiples, not one crowded axis
    assert fig.get_size_inches()[0] <= 7.0 + 1e-6              # drawn at the column's width
    colors = {ln.get_color() for a in panels for ln in a.lines if ln.get_marker() not in ("None", None, "")}
    assert set(VERSION_COLORS[:2]) <= colors and PEER_COLORS[0] in colors
    assert [t.get_text() for t in ax.get_yticklabels()] == ["v0_naive", "v1_block", "peer.op (peer)"]
    with pytest.raises(ValueError, match="one panel"):
        lad.plot(ax=ax)
    one = lad.plot(shapes=[(1024,)], ax=None)
    assert len([a for a in one.figure.axes if a.get_visible()]) == 2


def test_tables_keep_three_significant_digits_below_100_and_take_config_impl_names():
    from utils.ladder import metric_text
    assert [metric_text(v) for v in (0.512, 7.43, 45.0, 4064.4)] == ["0.512", "7.43", "45", "4064"]
    rec = FakeRecord()
    lad = Ladder(rec, make_registry(), shapes=[(1024,), (4096,)], dtypes=["float32"],
                 make=lambda s, d, r: Case((None,)), reference=lambda c: None, nbytes=lambda s, d: 8 * s[0],
                 peers={"peer.op": None}, ceiling=None)
    rec.entries += [dict(e, metric_name="TFLOP/s") for e in
                    (entry("v0_naive", (1024,), "float32", 0.512), entry("v0_naive[wide]", (1024,), "float32", 7.43),
                     entry("peer.op", (1024,), "float32", 45.0, peer=True))]
    lad.predict("v0_naive", 0.507, (1024,), "float32")
    t = lad.table(["v0_naive", "v0_naive[wide]"])
    assert [r[2:5] for r in t.rows] == [["v0_naive", "1000.0", "0.512"], ["v0_naive[wide]", "1000.0", "7.43"]]
    assert t.column("predicted") == ["0.507", ""]
    s = lad.summary()
    assert s.columns == ["shape", "dtype", "v0_naive", "peer.op"]          # v1 recorded nothing: no column
    assert s.rows == [["1024", "float32", "0.512", "45"], ["4096", "float32", "", ""]]
