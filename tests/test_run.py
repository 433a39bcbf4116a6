"""utils.run on a CPU: which notebooks are stale, and how a diagnostic pass reports failing cells."""
import nbformat
import pytest

from utils import run


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def _code(outputs):
    c = nbformat.v4.new_code_cell("pass")
    c.outputs = [nbformat.from_dict(o) for o in outputs]
    return c


def _error(name, value):
    return {"output_type": "error", "ename": name, "evalue": value, "traceback": []}


def test_first_errors_is_empty_for_a_clean_notebook():
    nb = _nb(nbformat.v4.new_markdown_cell("# t"), _code([{"output_type": "stream", "name": "stdout", "text": "ok"}]))
    assert run.first_errors(nb) == ""


def test_first_errors_names_cells_in_order_and_counts_the_rest():
    nb = _nb(_code([]), _code([_error("KeyError", "'x'")]), _code([_error("ValueError", "bad")]),
             _code([_error("CompileException", "e" * 500)]), _code([_error("NameError", "n")]))
    msg = run.first_errors(nb, limit=3)
    assert msg.startswith("cell 1: KeyError: 'x'; cell 2: ValueError: bad; cell 3: CompileException: ")
    assert msg.endswith(" (+1 more)")
    assert "e" * 201 not in msg                      # long messages are cut to 200 characters


def test_main_without_a_selection_is_an_error(monkeypatch):
    monkeypatch.setattr("utils.gpu.require_gpu", lambda: None)
    with pytest.raises(SystemExit):
        run.main([])
