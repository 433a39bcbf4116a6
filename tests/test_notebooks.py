"""CPU checks of every chapter notebook's source: code cells compile, shown snippets exist."""
import json
import re

import pytest

from utils.paths import CHAPTERS, KERNELS
from utils.show import snippets

NOTEBOOKS = sorted(CHAPTERS.glob("*.ipynb"))
SHOW = re.compile(r'show\(\s*"([\w./-]+\.cuh?)"\s*,\s*"([\w.-]+)"\s*\)')


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_code_cells_compile_and_show_existing_snippets(path):
    nb = json.loads(path.read_text())
    for k, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        body = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%"))
        compile(body, f"{path.name} cell {k}", "exec")
        for file, name in SHOW.findall(src):
            assert name in snippets((KERNELS / file).read_text()), \
                f"{path.name} cell {k} shows snippet {name!r}, which kernels/{file} lacks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_first_cell_sets_up_the_chapter(path):
    nb = json.loads(path.read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    # nothing else: without a GPU this cell must finish cleanly (its imports would fail), see
    # utils.notebook.stop_without_gpu
    assert "".join(first["source"]).strip() == f'import utils\nrec = utils.setup_notebook("{path.stem}")'



@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_cell_has_a_unique_id(path):
    """nbformat 4.5 requires cell ids (a cell added by hand after a run lacks one, and nbformat warns that
    this will become an error); ids must be unique within the notebook."""
    nb = json.loads(path.read_text())
    ids = [c.get("id") for c in nb["cells"]]
    missing = [k for k, i in enumerate(ids) if not i]
    assert not missing, f"{path.name}: cells {missing} have no id (give each a short unique hex id)"
    assert len(set(ids)) == len(ids), f"{path.name}: duplicate cell ids"
