import numpy as np
import pytest

from tests.fakes import FakeDeviceArray
from utils.build import CompileError, KernelSource, compile_source, local_includes, parse_ptxas
from utils.ops import Version, expect_array, registry
from utils.show import SnippetError, snippets

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_a' for 'sm_90'
ptxas info    : Function properties for k_a
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 4096 bytes smem
ptxas info    : Compiling entry function 'k_b' for 'sm_90'
ptxas info    : Function properties for k_b
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers
"""


def test_parse_ptxas():
    r = parse_ptxas(PTXAS)
    assert r["k_a"] == dict(registers=10, smem_bytes=4096, stack_bytes=0, spill_stores=0, spill_loads=0)
    assert r["k_b"]["spill_stores"] == 8 and r["k_b"]["registers"] == 255


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


def test_compile_reports_resources_and_follows_includes(tmp_path, monkeypatch):
    import utils.build as b
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "h.cuh").write_text("__device__ inline float twice(float x) { return 2 * x; }\n")
    (tmp_path / "k.cu").write_text('#include "h.cuh"\nextern "C" __global__ void k(float* y) '
                                   '{ y[threadIdx.x] = twice(y[threadIdx.x]); }\n')
    monkeypatch.setattr(b, "KERNELS", tmp_path)
    monkeypatch.setattr(b, "INCLUDE", inc)
    monkeypatch.setattr(b, "REPO", tmp_path)
    src = KernelSource("k.cu")
    assert [p.name for p in local_includes(src.path)] == ["k.cu", "h.cuh"]
    c = compile_source(src)
    assert c.arch == "sm_90" and c.cubin[:4] == b"\x7fELF"
    assert "k" in c.report and c.report["k"]["spill_stores"] == 0
    # edit the header: the next compile must see it (no stale cache)
    (inc / "h.cuh").write_text("__device__ inline float twice(float x) { return x +; }\n")
    with pytest.raises(CompileError, match="k.cu"):
        compile_source(src)


def test_hopper_sources_build_for_sm90a():
    assert KernelSource("x.cu", hopper=True).arch("sm_80") == "sm_90a"
    assert KernelSource("x.cu").arch("sm_80") == "sm_80"


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


def test_registry_rejects_duplicate_labels():
    v = Version("k", "v1", lambda: None, "idea")
    assert list(registry(v)) == ["v1"]
    with pytest.raises(ValueError, match="duplicate"):
        registry(v, v)


def test_cached_build_without_ptxas_log_is_rebuilt_for_the_report(tmp_path, monkeypatch):
    import utils.build as b
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k(float* y) { y[threadIdx.x] *= 2.f; }\n')
    monkeypatch.setattr(b, "KERNELS", tmp_path)
    monkeypatch.setattr(b, "REPO", tmp_path)
    real, nonces = b._nvrtc, []

    def cached_first(src, arch, nonce=None):  # the first build comes back as a cache hit: no log
        obj, text = real(src, arch, nonce)
        nonces.append(nonce)
        return obj, (text if nonce else "")
    monkeypatch.setattr(b, "_nvrtc", cached_first)
    report = compile_source(KernelSource("k.cu")).report
    assert nonces[0] is None and nonces[1] and report["k"]["registers"] > 0


def test_bench_helper_kernels_compile():
    """The L2 flush and the spin kernel live in utils/bench.py as source; keep them compiling."""
    from cuda.core import Program, ProgramOptions

    from utils.bench import _FLUSH_SRC
    obj = Program(_FLUSH_SRC, "c++", ProgramOptions(arch="sm_90")).compile("cubin")
    assert obj.code[:4] == b"\x7fELF"


def test_ptx_without_a_driver(tmp_path, monkeypatch):
    import utils.build as b
    (tmp_path / "k.cu").write_text('template <int N> __global__ void k(float4* y) { y[threadIdx.x].x *= N; }\n')
    monkeypatch.setattr(b, "KERNELS", tmp_path)
    text = b.ptx(KernelSource("k.cu", name_expressions=("k<3>",)))
    assert ".entry _Z1kILi3EEvP6float4" in text
    (tmp_path / "bad.cu").write_text("__global__ void k() { syntax error }\n")
    with pytest.raises(CompileError, match="bad.cu"):
        b.ptx(KernelSource("bad.cu"))
