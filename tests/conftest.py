import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils.gpu import _probe  # noqa: E402


def pytest_collection_modifyitems(config, items):
    ok, why = _probe()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {why}")
    for item in items:
        if "gpu" in item.keywords or "/gpu/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture
def rng():
    """Fresh random inputs for every test (seeded by the test's own randomness, not a constant)."""
    import numpy as np
    return np.random.default_rng()
