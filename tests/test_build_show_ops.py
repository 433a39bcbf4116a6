import numpy as np
import pytest

from tests.fakes import FakeDeviceArray
from utils.ops import expect_array
from utils.show import SnippetError, snippets


def test_snippets_extracts_nested_and_dedents():
    text = "a\n  // [[snippet: outer]]\n  x\n  // [[snippet: inner]]\n  y\n  // [[/snippet]]\n" \
           "  // [[/snippet]]\nz\n"
    s = snippets(text)
    assert s == {"outer": "x\ny", "inner": "y"}


@pytest.mark.parametrize("text", ["// [[snippet: a]]\n", "// [[/snippet]]\n",
                                  "// [[snippet: a]]\n// [[/snippet]]\n// [[snippet: a]]\n// [[/snippet]]\n"])
def test_snippet_errors(text):
    with pytest.raises(SnippetError):
        snippets(text)


def test_expect_array_accepts_good_input():
    x = FakeDeviceArray((4, 8), np.float32)
    assert expect_array(x, "x", dtype=np.float32, ndim=2, shape=(None, 8)) is x


@pytest.mark.parametrize("x,kw,msg", [
    (np.zeros(4, np.float32), {}, "expected a CUDA device array"),
    (FakeDeviceArray((4,), np.float64), dict(dtype=np.float32), "expected dtype float32, got float64"),
    (FakeDeviceArray((4,), np.float32), dict(ndim=2), "expected 2 dimensions"),
    (FakeDeviceArray((4, 3), np.float32), dict(shape=(None, 8)), r"expected shape \(\*, 8\)"),
    (FakeDeviceArray((4, 4), np.float32, strides=(4, 16)), {}, "C-contiguous"),
    (FakeDeviceArray((4,), np.float32, ptr=0x10004), {}, "16-byte aligned"),
])
def test_expect_array_rejects_with_clear_message(x, kw, msg):
    with pytest.raises(ValueError, match=msg):
        expect_array(x, "x", **kw)


def test_bench_helper_kernels_compile():
    """The L2 flush and the spin kernel live in utils/bench.py as source; keep them compiling."""
    from cuda.core import Program, ProgramOptions

    from utils.bench import _FLUSH_SRC
    obj = Program(_FLUSH_SRC, "c++", ProgramOptions(arch="sm_90")).compile("cubin")
    assert obj.code[:4] == b"\x7fELF"
