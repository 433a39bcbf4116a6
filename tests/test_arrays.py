"""utils.arrays on a CPU: xp, ceil_div, bf16, dtype names, and what the interop helpers refuse."""
import subprocess
import sys
import types

import numpy as np
import pytest

from utils import arrays
from utils.arrays import ceil_div, dtype_name, xp
from utils.paths import REPO


def test_xp_of_numpy_is_numpy_without_importing_cupy():
    code = ("import sys, numpy; from utils.arrays import xp; "
            "assert xp(numpy.zeros(3)) is numpy and xp([1, 2]) is numpy; "
            "assert 'cupy' not in sys.modules, 'xp imported cupy'")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_xp_asks_cupy_once_cupy_is_imported(monkeypatch):
    fake = types.ModuleType("cupy")
    fake.get_array_module = lambda x: "cupy-module-for-" + type(x).__name__
    monkeypatch.setitem(sys.modules, "cupy", fake)

    class DeviceArray:
        pass

    assert xp(DeviceArray()) == "cupy-module-for-DeviceArray"
    assert xp(np.ones(2)) is np                      # NumPy arrays never ask CuPy


@pytest.mark.parametrize("a,b,q", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (-5, 4, -1),
                                   (2**70 + 1, 2**35, 2**35 + 1), (np.int64(10), np.int32(3), 4)])
def test_ceil_div(a, b, q):
    assert ceil_div(a, b) == q and type(ceil_div(a, b)) is int


@pytest.mark.parametrize("a,b,msg", [(7, 0, "expected a positive divisor, got 0"),
                                     (7, -2, "positive divisor, got -2"),
                                     (7.0, 2, "expected integers, got 7.0 and 2"),
                                     (7, True, "expected integers")])
def test_ceil_div_rejects(a, b, msg):
    with pytest.raises(ValueError, match=msg):
        ceil_div(a, b)


def test_bf16_is_ml_dtypes_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert arrays.bf16() == np.dtype(ml_dtypes.bfloat16) and arrays.bf16().itemsize == 2
    assert dtype_name(arrays.bf16()) == "bfloat16"


def test_bf16_without_ml_dtypes_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)          # makes `import ml_dtypes` fail
    with pytest.raises(ImportError, match="need the ml_dtypes package"):
        arrays.bf16()


class TorchDtype:
    """What a torch dtype shows of itself to dtype_name: its str."""

    def __str__(self):
        return "torch.bfloat16"


def test_dtype_names():
    assert [dtype_name(d) for d in ("float32", np.float16, np.dtype(np.int8), "bfloat16")] == \
        ["float32", "float16", "int8", "bfloat16"]
    assert dtype_name(TorchDtype()) == "bfloat16"
    with pytest.raises(ValueError, match="expected a dtype, got 'floatish'"):
        dtype_name("floatish")


def test_interop_and_random_refuse_dtypes_they_cannot_carry():
    with pytest.raises(ValueError, match="expected one of float32, float16, bfloat16, int8, int32 .*float64"):
        arrays.as_torch(np.zeros(2))                 # refused before torch is imported
    with pytest.raises(ValueError, match="random_normal: expected dtype float32, float16, bfloat16, got int"):
        arrays.random_normal((4,), "int32")          # refused before cupy is imported
