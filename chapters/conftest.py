"""pytest's hooks for nbval over the chapters (`pytest --nbval-lax chapters/*.ipynb`, as make test and
scripts/gpu_session.sh run it): without a GPU every cell item skips with the one no-GPU sentence as its
reason, instead of a failure whose report is a traceback."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def pytest_collection_modifyitems(config, items):
    from utils.gpu import NoGPU, require_gpu
    try:
        require_gpu()
    except NoGPU as e:
        skip = pytest.mark.skip(reason=str(e))
        for item in items:
            if str(item.fspath).endswith(".ipynb"):
                item.add_marker(skip)
