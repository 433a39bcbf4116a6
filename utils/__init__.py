"""The book's toolkit: build, show, check, bench, hardware, roofline, record, run.

Op-agnostic: nothing here imports ``kernels`` or ``chapters``. Importing ``utils`` never needs a GPU;
the first call that does raises :class:`utils.gpu.NoGPU` with one plain sentence.
"""
from .gpu import NoGPU, MissingFeature, has_gpu, require_gpu, device_summary, gpu_slug, supports
from .paths import REPO, KERNELS, RESULTS, CHAPTERS

__all__ = [
    "NoGPU", "MissingFeature", "has_gpu", "require_gpu", "device_summary", "gpu_slug", "supports",
    "REPO", "KERNELS", "RESULTS", "CHAPTERS", "setup_notebook",
]


def setup_notebook(notebook: str):
    """First cell of every chapter: report the device, register ``%%requires``, open the record.

    Returns the chapter's :class:`utils.record.Record`. Without a GPU it prints one sentence and, in a
    Jupyter kernel, every later cell runs as a no-op (``utils.notebook.stop_without_gpu``): Run All and
    ``jupyter nbconvert --execute`` end cleanly, with the sentence and no traceback. That is why a
    chapter's first cell holds only this call: its imports (CuPy, the kernels) come in the next cell.
    """
    from . import notebook as _nb
    return _nb.setup(notebook)
