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


def _tree(tmp_path):
    """A repository with utils/, a kernels package importing another module, and one unrelated module."""
    for rel, text in {"utils/__init__.py": "", "utils/bench.py": "x = 1",
                      "kernels/__init__.py": "", "kernels/a.py": "from . import b\nimport numpy",
                      "kernels/b.py": "from kernels.pkg import helper", "kernels/pkg/__init__.py": "",
                      "kernels/pkg/helper.py": "", "kernels/unused.py": ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)


def test_imported_kernel_modules_are_followed_through_imports(tmp_path):
    from utils.stamp import imported_kernel_modules
    _tree(tmp_path)
    nb = _nb(["%%requires clusters\nfrom kernels import a\nimport utils"], [1])
    assert imported_kernel_modules(nb, tmp_path) == ["kernels/a.py", "kernels/b.py", "kernels/pkg/__init__.py",
                                                     "kernels/pkg/helper.py"]


def test_a_stamp_that_misses_the_toolkit_or_an_imported_module_is_stale(tmp_path):
    from utils.stamp import static_inputs
    _tree(tmp_path)
    nb = _nb(["from kernels import a"], [1])
    p = _stamped(tmp_path, nb, ["kernels/a.py"])
    assert any("does not cover" in m for m in problems(p, tmp_path))
    p = _stamped(tmp_path, _nb(["from kernels import a"], [1]), static_inputs(nb, tmp_path))
    assert problems(p, tmp_path) == []
    (tmp_path / "utils/bench.py").write_text("x = 2")           # the bench changed: the results may too
    assert any("stale" in m for m in problems(p, tmp_path))


def test_compile_summary_adds_builds_and_cache_loads():
    from utils.run import compile_summary
    log = "nvrtc\t2.5\tsoftmax.cu\tsm_90\nnvcc\t1.0\tgemm.cu\tsm_90a\ndisk\t0.01\tx.cu\tsm_90\nbad line\n"
    assert compile_summary(log) == {"compile_s": 3.5, "compile_builds": 2, "cache_load_s": 0.01, "cache_hits": 1}


def test_stderr_in_a_stored_output_is_a_problem(tmp_path):
    warn = [{"output_type": "stream", "name": "stderr", "text": "/host/path/x.py:3: UserWarning: ...\n"}]
    out = [{"output_type": "stream", "name": "stdout", "text": "fine\n"}]
    p = _stamped(tmp_path, _nb(["a", "b"], [1, 2], outputs=out), [])
    assert problems(p, tmp_path) == []
    p = _stamped(tmp_path, _nb(["a", "b"], [1, 2], outputs=warn), [])
    assert any("stderr output" in m for m in problems(p, tmp_path))
