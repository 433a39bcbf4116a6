"""utils.arrays on a GPU: zero-copy PyTorch interop (same pointer, same values, writes seen both ways),
seeded random inputs, xp of a CuPy array."""
import numpy as np
import pytest

from utils import arrays

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16", "bfloat16", "int8", "int32"]
SEED = 20261202
SHAPE = (37, 199)


def sample(dtype, seed):
    """A CuPy array of ``dtype``: normal floats, or small integers for the integer dtypes."""
    x, _ = arrays.random_normal(SHAPE, "float32", seed=seed, scale=20.0)
    return x.astype(arrays.bf16() if dtype == "bfloat16" else np.dtype(dtype))


def words(a):
    """The raw bits of an array on the host, so bf16 compares without a bf16 NumPy on either side."""
    a = a.get() if hasattr(a, "get") else a
    return a.view({1: np.int8, 2: np.int16, 4: np.int32}[a.dtype.itemsize])


@pytest.mark.parametrize("dtype", DTYPES)
def test_as_torch_and_back_share_memory(dtype):
    torch = pytest.importorskip("torch")
    seed = SEED + DTYPES.index(dtype)
    x = sample(dtype, seed)
    t = arrays.as_torch(x)
    assert t.is_cuda and t.data_ptr() == x.data.ptr and tuple(t.shape) == SHAPE, f"seed {seed}"
    assert t.dtype == getattr(torch, dtype), t.dtype
    host = t.cpu().view(torch.int16 if t.element_size() == 2 else t.dtype).numpy()
    assert np.array_equal(host.view(words(x).dtype), words(x)), f"{dtype}: values differ (seed {seed})"
    y = arrays.from_torch(t)
    assert y.data.ptr == x.data.ptr and y.dtype == x.dtype and y.shape == x.shape, f"seed {seed}"
    assert np.array_equal(words(y), words(x)), f"{dtype}: values differ after the round trip (seed {seed})"
    t[0, 0] = 3                                    # a write through torch is seen by CuPy: one memory
    assert float(x[0, 0].astype(np.float32).get()) == 3.0, \
        f"{dtype}: the torch write did not reach the CuPy array (seed {seed})"


def test_from_torch_of_a_torch_allocation():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, device="cuda", dtype=torch.bfloat16).reshape(3, 4)
    y = arrays.from_torch(t)
    assert y.data.ptr == t.data_ptr() and y.dtype == arrays.bf16() and y.shape == (3, 4)
    assert np.array_equal(y.astype(np.float32).get(), np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_random_normal_is_seeded(dtype):
    a, seed_a = arrays.random_normal((1000, 37), dtype, seed=SEED)
    b, _ = arrays.random_normal((1000, 37), dtype, seed=SEED)
    c, seed_c = arrays.random_normal((1000, 37), dtype)
    assert seed_a == SEED and isinstance(seed_c, int)
    assert a.dtype == (arrays.bf16() if dtype == "bfloat16" else np.dtype(dtype)) and a.shape == (1000, 37)
    assert np.array_equal(words(a), words(b)), f"same seed {SEED}, different draws"
    assert not np.array_equal(words(a), words(c)), f"seeds {SEED} and {seed_c} drew the same"
    again, _ = arrays.random_normal((1000, 37), dtype, seed=seed_c)
    assert np.array_equal(words(again), words(c)), f"the returned seed {seed_c} does not reproduce the draw"
    v = a.astype(np.float32)
    assert abs(float(v.mean())) < 0.05 and abs(float(v.std()) - 1) < 0.05, \
        f"not standard normal (seed {SEED})"
    s, _ = arrays.random_normal((1000, 37), dtype, seed=SEED, scale=4.0)
    assert abs(float(s.astype(np.float32).std()) - 4) < 0.2, f"scale not applied (seed {SEED})"


def test_xp_of_a_cupy_array_is_cupy():
    import cupy
    assert arrays.xp(cupy.zeros(3)) is cupy and arrays.xp(np.zeros(3)) is np
