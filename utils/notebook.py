"""What the first cell of a chapter calls: report the machine, register ``%%requires``, open the record."""
from __future__ import annotations

import os

from .gpu import MissingFeature, gpu_slug, lacks_sentence, missing_features, require_gpu  # noqa: F401
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


def setup(notebook: str) -> Record:
    import warnings

    import matplotlib
    # Without ipywidgets, tqdm.auto falls back to text bars and says so on stderr; text bars are fine.
    warnings.filterwarnings("ignore", message="IProgress not found")
    matplotlib.rcParams.update({"figure.dpi": 110, "savefig.dpi": 110, "axes.spines.top": False,
                                "axes.spines.right": False})
    try:
        from IPython import get_ipython
        ip = get_ipython()
        if ip is not None:
            ip.register_magic_function(requires_magic, magic_kind="cell", magic_name="requires")
    except ImportError:
        pass
    require_gpu()  # without a GPU: one sentence (utils.NoGPU), and Run All stops here
    from .stamp import environment, stamp_line
    env = environment()
    started = os.environ.get("BOOK_RUN_STARTED")
    print("run on " + stamp_line({**env, "started": started}))
    return Record(notebook, gpu=gpu_slug())


__all__ = ["setup", "requires_magic", "require_gpu"]
