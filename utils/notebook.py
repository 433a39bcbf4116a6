"""What the first cell of a chapter calls: report the machine, register ``%%requires``, open the record."""
from __future__ import annotations

import os

from .gpu import MissingFeature, NoGPU, gpu_slug, lacks_sentence, missing_features, require_gpu  # noqa: F401
from .record import Record


def requires_magic(line: str, cell: str):
    """``%%requires FEATURE [FEATURE...]``: run the cell only where the GPU has the features.

    Where it lacks one, print one line and skip the cell, so an A100 reader sees no traceback:
    "skipped: this cell needs clusters, which NVIDIA H200 emulating sm_80 (BOOK_ARCH=sm_80) lacks."
    """
    from IPython import get_ipython
    missing = missing_features(line.split())
    if missing:
        print(f"skipped: {lacks_sentence(missing)}.")
        return
    result = get_ipython().run_cell(cell)
    result.raise_error()


SKIPPED_CELL = "pass  # skipped: no CUDA GPU in this kernel (utils.notebook.stop_without_gpu)\n"


def skip_cell(lines: list[str]) -> list[str]:
    """An IPython input transformer: every cell becomes a no-op."""
    return [SKIPPED_CELL]


def stop_without_gpu(error: Exception):
    """No GPU: say so in one sentence and turn every later cell of this kernel into a no-op.

    Raising here would stop Run All with a one-line error in JupyterLab, but `jupyter nbconvert
    --execute` reports any cell error with its own 30-line Python traceback before the sentence. So the
    first cell finishes cleanly, prints the sentence, and the cells after it run as `pass`. Outside
    IPython (a script) it raises.
    """
    try:
        from IPython import get_ipython
        ip = get_ipython()
    except ImportError:
        ip = None
    if ip is None:
        raise error
    sentence = f"{error} The cells below are skipped in this kernel."
    print(sentence)    # once: ipykernel forwards the process's own stderr into the cell too
    if skip_cell not in ip.input_transformers_cleanup:
        ip.input_transformers_cleanup.append(skip_cell)
    return None


def setup(notebook: str) -> Record:
    import warnings

    from .plot import apply_style
    # Without ipywidgets, tqdm.auto falls back to text bars and says so on stderr; text bars are fine.
    warnings.filterwarnings("ignore", message="IProgress not found")
    apply_style()
    try:
        from IPython import get_ipython
        ip = get_ipython()
        if ip is not None:
            ip.register_magic_function(requires_magic, magic_kind="cell", magic_name="requires")
    except ImportError:
        pass
    try:
        require_gpu()
    except NoGPU as e:
        return stop_without_gpu(e)
    from .stamp import environment, stamp_line
    env = environment()
    started = os.environ.get("BOOK_RUN_STARTED")
    print("run on " + stamp_line({**env, "started": started}))
    return Record(notebook, gpu=gpu_slug())


__all__ = ["setup", "requires_magic", "require_gpu"]
