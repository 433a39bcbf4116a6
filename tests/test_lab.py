"""The reader's JupyterLab (make lab): the working copy in lab/ never overwrites a reader's changes, the
Makefile keeps runs away from chapters/ and results/, and the make virtualenvs import the repository."""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def load_lab_copy():
    spec = importlib.util.spec_from_file_location("lab_copy", REPO / "scripts" / "lab_copy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lab_copy = load_lab_copy()


@pytest.fixture
def book(tmp_path):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    (chapters / "01-a.ipynb").write_text('{"cells": ["a"]}\n')
    (chapters / "02-b.ipynb").write_text('{"cells": ["b"]}\n')
    return chapters, tmp_path / "lab"


def run_sync(chapters, lab, refresh=False):
    said = []
    actions = lab_copy.sync(chapters, lab, refresh=refresh, log=said.append)
    return actions, said


@pytest.mark.parametrize("source,copy,copied,expected", [
    ("s1", None, None, "copy"),           # no copy yet
    ("s1", "s1", None, "keep"),           # identical copy, not yet in the manifest
    ("s1", "edited", "s1", "keep"),       # the reader ran or edited it; the chapter is as copied
    ("s2", "s1", "s1", "update"),         # the chapter changed; the copy is as copied
    ("s2", "edited", "s1", "conflict"),   # both changed
    ("s2", "other", None, "conflict"),    # a copy from before the manifest, different from the chapter
])
def test_decide(source, copy, copied, expected):
    assert lab_copy.decide(source, copy, copied) == expected


def test_first_sync_copies_every_chapter(book):
    chapters, lab = book
    actions, said = run_sync(chapters, lab)
    assert actions == {"01-a.ipynb": "copy", "02-b.ipynb": "copy"}
    assert (lab / "01-a.ipynb").read_text() == (chapters / "01-a.ipynb").read_text()
    assert said == []


def test_reader_changes_survive_a_sync(book):
    chapters, lab = book
    run_sync(chapters, lab)
    (lab / "01-a.ipynb").write_text('{"cells": ["a"], "outputs": "Run All without a GPU"}\n')
    actions, _ = run_sync(chapters, lab)
    assert actions["01-a.ipynb"] == "keep"
    assert "Run All without a GPU" in (lab / "01-a.ipynb").read_text()


def test_an_unchanged_copy_follows_its_chapter(book):
    chapters, lab = book
    run_sync(chapters, lab)
    (chapters / "02-b.ipynb").write_text('{"cells": ["b, re-executed"]}\n')
    actions, _ = run_sync(chapters, lab)
    assert actions == {"01-a.ipynb": "keep", "02-b.ipynb": "update"}
    assert "re-executed" in (lab / "02-b.ipynb").read_text()
    actions, _ = run_sync(chapters, lab)
    assert actions["02-b.ipynb"] == "keep"


def test_a_changed_copy_of_a_changed_chapter_is_kept_and_reported(book):
    chapters, lab = book
    run_sync(chapters, lab)
    (lab / "01-a.ipynb").write_text("mine\n")
    (chapters / "01-a.ipynb").write_text('{"cells": ["a2"]}\n')
    actions, said = run_sync(chapters, lab)
    assert actions["01-a.ipynb"] == "conflict"
    assert (lab / "01-a.ipynb").read_text() == "mine\n"
    assert len(said) == 1 and "REFRESH=1" in said[0], said


def test_refresh_backs_the_copy_up_before_replacing_it(book):
    chapters, lab = book
    run_sync(chapters, lab)
    (lab / "01-a.ipynb").write_text("mine\n")
    (chapters / "01-a.ipynb").write_text('{"cells": ["a2"]}\n')
    actions, _ = run_sync(chapters, lab, refresh=True)
    assert actions["01-a.ipynb"] == "refresh"
    assert (lab / "01-a.ipynb").read_text() == '{"cells": ["a2"]}\n'
    backups = list((lab / "backup").glob("01-a.*.ipynb"))
    assert [b.read_text() for b in backups] == ["mine\n"]
    # a second refresh within the same second keeps both backups
    (lab / "01-a.ipynb").write_text("mine again\n")
    (chapters / "01-a.ipynb").write_text('{"cells": ["a3"]}\n')
    run_sync(chapters, lab, refresh=True)
    assert sorted(b.read_text() for b in (lab / "backup").glob("01-a.*.ipynb")) == sorted(["mine again\n", "mine\n"])


def test_refresh_leaves_copies_the_reader_changed_of_unchanged_chapters(book):
    chapters, lab = book
    run_sync(chapters, lab)
    (lab / "02-b.ipynb").write_text("experiment\n")
    actions, _ = run_sync(chapters, lab, refresh=True)
    assert actions["02-b.ipynb"] == "keep"
    assert (lab / "02-b.ipynb").read_text() == "experiment\n"
    assert not (lab / "backup").exists()


def test_sync_never_writes_to_chapters(book):
    chapters, lab = book
    before = {p.name: p.read_bytes() for p in chapters.iterdir()}
    run_sync(chapters, lab)
    (lab / "01-a.ipynb").write_text("mine\n")
    (chapters / "02-b.ipynb").write_text("new\n")
    before["02-b.ipynb"] = b"new\n"
    run_sync(chapters, lab, refresh=True)
    assert {p.name: p.read_bytes() for p in chapters.iterdir()} == before


def test_bad_folders_raise_value_error(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        lab_copy.sync(tmp_path / "missing", tmp_path / "lab")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="found none"):
        lab_copy.sync(tmp_path / "empty", tmp_path / "lab")


def test_damaged_manifest_raises_value_error(book):
    chapters, lab = book
    lab.mkdir()
    (lab / lab_copy.MANIFEST).write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="expected a JSON object"):
        lab_copy.sync(chapters, lab)


def make_dry_run(target, **variables):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    args = ["make", "-n", "-C", str(REPO), target] + [f"{k}={v}" for k, v in variables.items()]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def test_make_lab_runs_jupyterlab_on_the_copy_with_records_redirected():
    out = make_dry_run("lab", LAB_GPU="")
    lab_line = next(line for line in out.splitlines() if "jupyter lab" in line)
    assert "--ServerApp.root_dir=lab" in lab_line, lab_line
    assert f"BOOK_RESULTS={REPO}/lab/results" in lab_line, lab_line
    assert "scripts/lab_copy.py" in out and "--refresh" not in out
    assert "--refresh" in make_dry_run("lab-setup", LAB_GPU="", REFRESH="1")


def test_make_serve_listens_on_this_machine_only_by_default():
    out = make_dry_run("serve")
    assert "--bind 127.0.0.1" in out, out
    assert "--bind 0.0.0.0" in make_dry_run("serve", HOST="0.0.0.0")


def test_the_make_virtualenv_imports_the_repository_from_any_directory(tmp_path):
    venvs = [REPO / ".venv", REPO / ".venv-lab"]
    if Path(sys.prefix).resolve() not in [v.resolve() for v in venvs if v.exists()]:
        pytest.skip(f"not running in a make virtualenv ({sys.prefix}); `make setup` makes one")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import utils, kernels; print(utils.__file__)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()).resolve().is_relative_to(REPO), out.stdout


def test_the_book_build_skips_the_lab_venv_and_copies():
    """Without these, a reader's `make lab` makes the strict build parse .venv-lab's READMEs and fail."""
    import yaml
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    assert {".venv-lab", "lab"} <= set(config["exclude_patterns"]), config["exclude_patterns"]
