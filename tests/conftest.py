import sys
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils.gpu import NoGPU, require_gpu  # noqa: E402


def gpu_missing_reason() -> str | None:
    """None where a CUDA GPU is usable, else the sentence utils.gpu gives for its absence."""
    try:
        require_gpu()
    except NoGPU as e:
        return str(e)
    return None


def pytest_collection_modifyitems(config, items):
    why = gpu_missing_reason()
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {why}")
    for item in items:
        if "gpu" in item.keywords or "/gpu/" in str(item.fspath):
            item.add_marker(skip)


def seed_for(nodeid: str) -> int:
    """The seed of a test's random draws: stable per test (its node id), different between tests."""
    return zlib.crc32(nodeid.encode())


@pytest.fixture
def rng(request):
    """A numpy Generator seeded per test (see seed_for); a failing test's report names the seed."""
    import numpy as np
    seed = seed_for(request.node.nodeid)
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seeds = [v for k, v in item.user_properties if k == "seed"]
    if report.failed and seeds:
        report.sections.append(("random seed", f"rng fixture seed: {seeds[0]} (np.random.default_rng({seeds[0]}))"))
