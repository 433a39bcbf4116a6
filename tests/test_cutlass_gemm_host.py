"""Chapter 13's CUTLASS peer on a CPU: the shared library builds with nvcc from the nvidia-cutlass headers, exports
its entry point and holds sm_90a code, and a second build is a cache hit. Skipped without nvcc or the headers (a
few minutes of nvcc otherwise: CUTLASS is all templates)."""
import ctypes

import pytest

from kernels import cutlass_gemm as CG


def built():
    import utils.build as b
    try:
        return CG.build_library()
    except b.ToolchainMissing as e:
        pytest.skip(str(e))


def test_the_library_builds_once_and_exports_its_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    path = built()
    assert path.parent == tmp_path / "libs" and path.stat().st_size > 100_000
    assert b"sm_90a" in path.read_bytes()
    mtime = path.stat().st_mtime_ns
    assert CG.build_library() == path and path.stat().st_mtime_ns == mtime       # the cache, not nvcc again
    assert hasattr(ctypes.CDLL(str(path)), CG.ENTRY)


def test_the_key_follows_the_source(monkeypatch):
    try:
        key = CG.library_key()
    except Exception as e:          # noqa: BLE001 - no nvcc or headers: nothing to key
        pytest.skip(str(e))
    monkeypatch.setattr(CG, "NVCC_FLAGS", (*CG.NVCC_FLAGS, "-lineinfo"))
    assert CG.library_key() != key
