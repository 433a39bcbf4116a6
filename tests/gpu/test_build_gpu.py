"""utils.build on a GPU: BOOK_ARCH=sm_80 loads and runs PTX, refuses Hopper sources in one line, and an
nvcc-built CuTe kernel runs. The emulation runs in a fresh process (BOOK_ARCH is read once per process)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import utils.build as b
from tests.build_helpers import CUTE_SMOKE, cutlass_or_skip, nvcc_or_skip, scratch_kernels

pytestmark = pytest.mark.gpu

EMULATED_RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    import cupy, numpy as np
    import utils.build as b
    from utils.gpu import MissingFeature, device_summary, supports
    b.KERNELS = b.REPO = Path(sys.argv[1])
    b.INCLUDE = b.KERNELS / "include"
    assert device_summary()["emulated_arch"] == "sm_80", device_summary()
    assert not any(supports(f) for f in ("clusters", "tma", "wgmma", "setmaxnreg"))
    assert supports("cp.async") and supports("bf16-mma")
    src = b.KernelSource("scale.cu")
    n = 1037
    x = cupy.asarray(np.random.default_rng(int(sys.argv[2])).standard_normal(n, dtype=np.float32))
    y = cupy.full(n, np.nan, dtype=cupy.float32)
    src.function("scale")(((n + 255) // 256,), (256,), (x, y, np.int32(n)))
    comp = b.compile_source(src)
    assert comp.arch == "sm_80" and b.loads_ptx(comp), comp.arch
    assert cupy.array_equal(y, 2 * x), "the PTX-loaded kernel computed wrong values"
    try:
        b.load(b.KernelSource("pair.cu", requires=("clusters",)))
        raise AssertionError("a cluster source loaded under BOOK_ARCH=sm_80")
    except MissingFeature as e:
        print("REFUSED", e)
    print("OK")
""")


def test_book_arch_sm80_runs_ptx_and_refuses_cluster_sources_on_this_gpu(tmp_path):
    kernels = tmp_path / "kernels"
    (kernels / "include").mkdir(parents=True)
    (kernels / "scale.cu").write_text(
        'extern "C" __global__ void scale(const float* x, float* y, int n) '
        '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.f * x[i]; }\n')
    (kernels / "pair.cu").write_text('extern "C" __global__ void __cluster_dims__(2, 1, 1) pair(float* y) '
                                     '{ y[threadIdx.x] *= 2.f; }\n')
    seed = int.from_bytes(os.urandom(4), "little")
    env = {**os.environ, "BOOK_ARCH": "sm_80", b.CACHE_ENV: str(tmp_path / "cache"),
           "PYTHONPATH": str(b.REPO)}
    r = subprocess.run([sys.executable, "-c", EMULATED_RUN, str(kernels), str(seed)], env=env, cwd=b.REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.endswith("OK\n"), f"seed {seed}\n{r.stdout}\n{r.stderr}"
    refused = next(line for line in r.stdout.splitlines() if line.startswith("REFUSED"))
    assert refused.endswith("pair.cu needs clusters, which "
                            f"{_gpu_name()} emulating sm_80 (BOOK_ARCH=sm_80) lacks"), refused


def _gpu_name() -> str:
    from utils.gpu import device_summary
    return device_summary()["name"]


def test_device_summary_names_the_emulated_arch_or_none():
    from utils.gpu import device_summary
    assert device_summary()["emulated_arch"] == (os.environ.get("BOOK_ARCH") or None)


def test_an_nvcc_built_cute_kernel_runs(tmp_path, monkeypatch):
    import cupy
    nvcc_or_skip()
    dirs = cutlass_or_skip()
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "cute_smoke.cu").write_text(CUTE_SMOKE)
    src = b.KernelSource("cute_smoke.cu", compiler="nvcc", include_dirs=dirs)
    seed = int.from_bytes(os.urandom(4), "little")
    x = cupy.asarray(np.random.default_rng(seed).standard_normal((32, 32), dtype=np.float32))
    y = cupy.full((32, 32), np.nan, dtype=cupy.float32)
    src.function("cute_smoke_transpose")((1,), (32, 32), (x, y))
    assert cupy.array_equal(y, x.T), f"seed {seed}"
