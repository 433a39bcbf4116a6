import json

from utils.stamp import problems, source_sha256


def _nb(sources, counts, outputs=None):
    cells = [{"cell_type": "code", "source": s, "execution_count": c, "metadata": {},
              "outputs": outputs or []} for s, c in zip(sources, counts)]
    cells.insert(1, {"cell_type": "markdown", "source": "prose", "metadata": {}})
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _stamped(tmp_path, nb, inputs, gpu="NVIDIA H200"):
    nb["metadata"]["book_run"] = {"gpu": gpu, "started": "2026-11-29T00:00:00Z", "wall_s": 1.0,
                                  "inputs": inputs, "source_sha256": source_sha256(nb, inputs, tmp_path)}
    p = tmp_path / "nb.ipynb"
    p.write_text(json.dumps(nb))
    return p


def test_fresh_notebook_has_no_problems(tmp_path):
    (tmp_path / "k.cu").write_text("kernel v1")
    p = _stamped(tmp_path, _nb(["a = 1", "b = 2"], [1, 2]), ["k.cu"])
    assert problems(p, tmp_path) == []


def test_kernel_edit_makes_it_stale(tmp_path):
    (tmp_path / "k.cu").write_text("kernel v1")
    p = _stamped(tmp_path, _nb(["a = 1"], [1]), ["k.cu"])
    (tmp_path / "k.cu").write_text("kernel v2")
    assert any("stale" in m for m in problems(p, tmp_path))


def test_code_edit_makes_it_stale_but_prose_does_not(tmp_path):
    nb = _nb(["a = 1"], [1])
    p = _stamped(tmp_path, nb, [])
    nb2 = json.loads(p.read_text())
    nb2["cells"][1]["source"] = "new prose"
    p.write_text(json.dumps(nb2))
    assert problems(p, tmp_path) == []
    nb2["cells"][0]["source"] = "a = 2"
    p.write_text(json.dumps(nb2))
    assert any("stale" in m for m in problems(p, tmp_path))


def test_unstamped_wrong_gpu_errors_and_order(tmp_path):
    p = tmp_path / "nb.ipynb"
    p.write_text(json.dumps(_nb(["a", "b"], [None, None])))
    msgs = problems(p, tmp_path)
    assert any("no book_run stamp" in m for m in msgs) and any("not executed" in m for m in msgs)
    err = [{"output_type": "error", "ename": "E", "evalue": "", "traceback": []}]
    p = _stamped(tmp_path, _nb(["a", "b"], [2, 1], outputs=err), [], gpu="NVIDIA A100-SXM4-80GB")
    msgs = problems(p, tmp_path)
    assert any("not on an H100/H200" in m for m in msgs)
    assert any("error output" in m for m in msgs)
    assert any("out of order" in m for m in msgs)


def test_toc_lists_notebooks_not_markdown(tmp_path):
    from utils.stamp import toc_notebooks
    (tmp_path / "intro.md").write_text("# hi")
    (tmp_path / "page.md").write_text("# page")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nparts:\n- caption: A\n  chapters:\n"
                                       "  - file: page\n  - file: chapters/01-x\n")
    assert toc_notebooks(tmp_path) == [tmp_path / "chapters/01-x.ipynb"]
