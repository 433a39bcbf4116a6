"""Without a GPU, executing a chapter (Run All, `jupyter nbconvert --execute`, nbclient) ends cleanly:
the first cell prints the one no-GPU sentence and every later cell is skipped, so no traceback appears."""
import copy

import pytest

from utils.paths import CHAPTERS

NOTEBOOKS = sorted(CHAPTERS.glob("*.ipynb"))


def _no_gpu():
    from utils.gpu import has_gpu
    return not has_gpu()


@pytest.mark.skipif(not _no_gpu(), reason="this machine has a GPU: the chapters would really run")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_chapter_executes_without_a_gpu_to_one_sentence_and_no_traceback(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("BOOK_RESULTS", str(tmp_path / "results"))     # nothing may touch results/
    nb = nbformat.read(str(path), as_version=4)
    before = copy.deepcopy(nb)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [(k, o) for k, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.outputs]
    assert not [o for _, o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for _, o in outputs)
    assert text.count("no CUDA GPU here") == 1 and "Traceback" not in text          # one sentence, once
    assert not [o for _, o in outputs if o.get("name") == "stderr"]
    first = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code")
    assert {k for k, _ in outputs} == {first}, "only the first cell says something"
    assert nbformat.read(str(path), as_version=4) == before          # the stored notebook is untouched


def test_stop_without_gpu_turns_later_cells_into_no_ops(monkeypatch, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    import IPython
    from utils.gpu import NoGPU
    from utils.notebook import stop_without_gpu
    ip = InteractiveShell.instance()
    monkeypatch.setattr(IPython, "get_ipython", lambda: ip)
    try:
        assert stop_without_gpu(NoGPU("no CUDA GPU here: test.")) is None
        assert "no CUDA GPU here: test. The cells below are skipped" in capsys.readouterr().out
        result = ip.run_cell("import module_that_does_not_exist")
        assert result.success
    finally:
        from utils.notebook import skip_cell
        ip.input_transformers_cleanup[:] = [t for t in ip.input_transformers_cleanup if t is not skip_cell]
    with pytest.raises(NoGPU):                 # outside IPython a script gets the error itself
        monkeypatch.setattr(IPython, "get_ipython", lambda: None)
        stop_without_gpu(NoGPU("no CUDA GPU here: test."))


def test_nbval_items_skip_with_the_sentence_without_a_gpu(monkeypatch):
    import importlib.util

    import utils.gpu
    spec = importlib.util.spec_from_file_location("chapters_conftest", CHAPTERS / "conftest.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)

    class Item:
        def __init__(self, path):
            self.fspath, self.markers = path, []

        def add_marker(self, m):
            self.markers.append(m)

    def no_gpu():
        raise utils.gpu.NoGPU("no CUDA GPU here: test.")
    monkeypatch.setattr(utils.gpu, "require_gpu", no_gpu)
    items = [Item("chapters/01-simt.ipynb"), Item("tests/test_x.py")]
    hooks.pytest_collection_modifyitems(None, items)
    assert [m.kwargs["reason"] for m in items[0].markers] == ["no CUDA GPU here: test."]
    assert items[1].markers == []
    monkeypatch.setattr(utils.gpu, "require_gpu", lambda: None)
    items = [Item("chapters/01-simt.ipynb")]
    hooks.pytest_collection_modifyitems(None, items)
    assert items[0].markers == []
