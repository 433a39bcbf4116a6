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

    Returns the chapter's :class:`utils.record.Record`. Without a GPU it raises :class:`NoGPU`, which
    Jupyter shows as one sentence, so "Run All" stops at the first cell instead of failing everywhere.
    """
    from . import notebook as _nb
    return _nb.setup(notebook)
