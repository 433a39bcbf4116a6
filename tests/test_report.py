"""utils.report.profile_excerpt: one kernel's block out of a stored Nsight Compute summary."""
import pytest

from utils.report import profile_excerpt

SUMMARY = """# header line
2 profiled kernels
== void k_a<1>(int)
   time 1 us
== void k_b<2>(int)
   time 2 us
   stall cycles per issued instruction, total 3.00:
"""


def test_profile_excerpt_returns_one_block(tmp_path):
    (tmp_path / "gpu0" / "profiles").mkdir(parents=True)
    (tmp_path / "gpu0" / "profiles" / "p.txt").write_text(SUMMARY)
    assert profile_excerpt("k_a<1>", "p", gpu="gpu0", root=tmp_path) == "== void k_a<1>(int)\n   time 1 us"
    assert profile_excerpt("k_b", "p", gpu="gpu0", root=tmp_path).splitlines()[-1].endswith("total 3.00:")
    with pytest.raises(KeyError, match="k_c"):
        profile_excerpt("k_c", "p", gpu="gpu0", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no stored profile"):
        profile_excerpt("k_a", "missing", gpu="gpu0", root=tmp_path)


def test_the_stored_h200_profile_has_the_chapters_kernels():
    text = profile_excerpt("w4a16_marlin<1, 1, 4>", "2026-11-29-bar-misses")
    assert "stall cycles per issued instruction" in text and "issue active" in text


def test_profile_excerpt_reads_the_repository_not_the_redirected_record(monkeypatch, tmp_path):
    """nbval runs with BOOK_RESULTS pointing at a scratch folder; stored profiles must still be found."""
    import importlib
    import utils.paths
    import utils.report
    monkeypatch.setenv("BOOK_RESULTS", str(tmp_path))
    try:
        importlib.reload(utils.paths)
        report = importlib.reload(utils.report)
        assert "issue active" in report.profile_excerpt("w4a16_marlin<1, 1, 4>", "2026-11-29-bar-misses")
    finally:
        monkeypatch.delenv("BOOK_RESULTS")
        importlib.reload(utils.paths)
        importlib.reload(utils.report)


def test_results_page_folds_each_chapters_table_under_a_visible_heading(tmp_path):
    import json

    from utils.report import results_markdown
    (tmp_path / "gpu0").mkdir()
    entry = {"op": "copy", "impl": "ceiling.copy", "dtype": "float32", "shape": [4], "ms": 1.0,
             "metric": 10.0, "metric_name": "GB/s", "run": "r1", "is_peer": True}
    (tmp_path / "gpu0" / "01-x.json").write_text(json.dumps({"notebook": "01-x", "run": "r1", "entries": [entry]}))
    md = results_markdown(tmp_path)
    head, fold = md.index("### 01-x"), md.index(":::{admonition} 展开 1 条记录")
    assert head < md.index("运行 `r1`，1 条记录。") < fold < md.index("| op |") < md.rindex(":::")
    assert ":class: dropdown" in md
