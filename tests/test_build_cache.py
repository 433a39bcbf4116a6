"""The on-disk compile cache of utils.build: keyed by everything that decides a build, shared by
processes, safe against corrupt entries, logged (BOOK_COMPILE_LOG) and counted (compile_stats)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import utils.build as b
from tests.build_helpers import scratch_kernels
from utils.build import KernelSource, compile_source, compile_stats

KERNEL = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] *= 2.f; }\n'
TWO_KERNELS = KERNEL + 'extern "C" __global__ void k2(float* y) { y[threadIdx.x] += 1.f; }\n'


def delta(before: dict) -> dict:
    now = compile_stats()
    return {k: now[k] - before[k] for k in now}


def entry_file(src: KernelSource):
    comp = compile_source(src)
    return b.cache_dir() / f"{b.cache_key(src, comp.arch, comp.inputs)}.build"


def test_a_second_compile_comes_from_disk_and_each_is_logged(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text(KERNEL)
    log = tmp_path / "compile.log"
    monkeypatch.setenv(b.COMPILE_LOG_ENV, str(log))
    src = KernelSource("k.cu")
    before = compile_stats()
    first = compile_source(src)
    assert compile_source(src) is first                    # in memory: neither counted nor logged
    b.clear_memory_cache()
    again = compile_source(src)
    d = delta(before)
    assert (d["builds"], d["disk_hits"]) == (1, 1)
    assert d["nvrtc_s"] > 0 and d["disk_s"] > 0 and d["nvcc_s"] == 0
    assert (again.cubin, again.report, again.ptx) == (first.cubin, first.report, first.ptx)
    lines = [line.split("\t") for line in log.read_text().splitlines()]
    kinds = [(kind, file, arch) for kind, _, file, arch in lines]
    assert kinds == [("nvrtc", "k.cu", "sm_90"), ("disk", "k.cu", "sm_90")]
    assert all(float(seconds) > 0 for _, seconds, _, _ in lines)


def test_compile_stats_has_the_documented_fields():
    assert set(compile_stats()) == {"nvrtc_s", "nvcc_s", "disk_s", "builds", "disk_hits"}


COMPILE_IN_A_PROCESS = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import utils.build as b
    b.KERNELS = b.REPO = Path(sys.argv[1])
    b.INCLUDE = b.KERNELS / "include"
    b.compile_source(b.KernelSource("k.cu"))
    print(json.dumps(b.compile_stats()))
""")


def compile_in_processes(kernels, cache, n: int) -> list[dict]:
    """Start ``n`` Python processes at once, each compiling kernels/k.cu; their compile_stats()."""
    env = {**os.environ, b.CACHE_ENV: str(cache), "PYTHONPATH": str(b.REPO)}
    env.pop(b.COMPILE_LOG_ENV, None)
    procs = [subprocess.Popen([sys.executable, "-c", COMPILE_IN_A_PROCESS, str(kernels)], env=env, cwd=b.REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    return [json.loads(out) for out, _ in outs]


def test_processes_share_the_cache_and_a_second_one_compiles_in_well_under_a_second(tmp_path):
    repo = b.REPO
    kernels = tmp_path / "kernels"
    (kernels / "include").mkdir(parents=True)
    (kernels / "k.cu").write_text(KERNEL)
    cache = tmp_path / "cache"
    cold = compile_in_processes(kernels, cache, 3)         # racing writers: each renames a whole entry
    assert all(s["builds"] + s["disk_hits"] == 1 for s in cold) and sum(s["builds"] for s in cold) >= 1, cold
    assert [p.name for p in cache.iterdir()] == [next(cache.iterdir()).name]   # one entry, no temp file left
    warm, = compile_in_processes(kernels, cache, 1)
    assert (warm["builds"], warm["disk_hits"]) == (0, 1), warm
    assert warm["disk_s"] < 1.0, warm
    assert b.REPO == repo


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped_byte", "empty"])
def test_a_corrupt_entry_is_rebuilt(tmp_path, monkeypatch, damage):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text(KERNEL)
    src = KernelSource("k.cu")
    path = entry_file(src)
    data = path.read_bytes()
    path.write_bytes({"garbage": b"not a build", "truncated": data[: len(data) // 2], "empty": b"",
                      "flipped_byte": data[:-40] + bytes([data[-40] ^ 1]) + data[-39:]}[damage])
    b.clear_memory_cache()
    before = compile_stats()
    comp = compile_source(src)
    assert (delta(before)["builds"], delta(before)["disk_hits"]) == (1, 0)
    assert "k" in comp.report
    rewritten = b.stored(path.stem)                                # a whole, valid entry again
    assert rewritten is not None and rewritten.cubin == comp.cubin


def test_an_entry_whose_report_misses_a_kernel_is_rebuilt(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text(TWO_KERNELS)
    src = KernelSource("k.cu")
    comp = compile_source(src)
    key = b.cache_key(src, comp.arch, comp.inputs)
    marker = "ptxas info    : Compiling entry function"
    sections = comp.log.split(marker)
    only_k = marker.join(s for s in sections if "'k2'" not in s)
    assert set(b.parse_ptxas(only_k)) == {"k"}
    b.store(key, src, b.Build(comp.cubin, comp.packed_ptx, only_k, comp.symbols), comp.arch)
    b.clear_memory_cache()
    before = compile_stats()
    assert set(compile_source(src).report) == {"k", "k2"} and delta(before)["builds"] == 1


def test_a_build_without_ptxas_log_is_rebuilt_for_the_report(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text(KERNEL)
    real, nonces = b.nvrtc_compile, []

    def cached_first(src, arch, nonce=None):  # the first build comes back as a cache hit: no log
        out = real(src, arch, nonce)
        nonces.append(nonce)
        return out if nonce else b.Build(out.cubin, out.packed_ptx, "", out.symbols)
    monkeypatch.setattr(b, "nvrtc_compile", cached_first)
    report = compile_source(KernelSource("k.cu")).report
    assert nonces[0] is None and nonces[1] and report["k"]["registers"] > 0


def key_of(src: KernelSource, arch: str = "sm_90") -> str:
    return b.cache_key(src, arch, b.local_includes(src.path, src.include_dirs))


@pytest.mark.parametrize("change", ["header", "define", "arch", "name_expressions", "compiler_version",
                                    "include_dir_package_version"])
def test_the_key_changes_with_everything_that_decides_the_build(tmp_path, monkeypatch, change):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "include" / "h.cuh").write_text("#define SCALE 2.f\n")
    (kernels / "k.cu").write_text('#include "h.cuh"\n' + KERNEL.replace("2.f", "SCALE"))
    site = tmp_path / "site"
    (site / "wheelpkg" / "include").mkdir(parents=True)
    (site / "wheelpkg-1.0.dist-info").mkdir()
    (site / "wheelpkg-1.0.dist-info" / "top_level.txt").write_text("wheelpkg\n")
    monkeypatch.syspath_prepend(str(site))
    b.site_providers.cache_clear()
    src = KernelSource("k.cu", include_dirs=(str(site / "wheelpkg" / "include"),))
    key = key_of(src)
    assert key_of(src) == key
    if change == "header":
        (kernels / "include" / "h.cuh").write_text("#define SCALE 3.f\n")
    elif change == "define":
        src = KernelSource("k.cu", include_dirs=src.include_dirs, defines=(("EXTRA", "1"),))
    elif change == "name_expressions":
        src = KernelSource("k.cu", include_dirs=src.include_dirs, name_expressions=("k",))
    elif change == "compiler_version":
        monkeypatch.setattr(b, "nvrtc_version", lambda: "99.9")
    elif change == "include_dir_package_version":
        (site / "wheelpkg-1.0.dist-info").rename(site / "wheelpkg-1.1.dist-info")
        b.site_providers.cache_clear()
    new_key = key_of(src, "sm_80" if change == "arch" else "sm_90")
    b.site_providers.cache_clear()
    assert new_key != key


def test_the_key_does_not_depend_on_where_the_checkout_lives(tmp_path, monkeypatch):
    keys = []
    for where in ("one", "two"):
        kernels = scratch_kernels(monkeypatch, tmp_path / where)
        (kernels / "k.cu").write_text(KERNEL)
        keys.append(key_of(KernelSource("k.cu")))
    assert keys[0] == keys[1]


@pytest.mark.parametrize("env,expected", [
    ({"BOOK_CACHE_DIR": "{tmp}/mine", "XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/mine"),
    ({"XDG_CACHE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/fa2-book/kernels"),
    ({"HOME": "{tmp}/home"}, "{tmp}/home/.cache/fa2-book/kernels"),
])
def test_the_cache_location(tmp_path, monkeypatch, env, expected):
    for name in ("BOOK_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    assert str(b.cache_dir()) == expected.format(tmp=tmp_path)


def test_an_unwritable_cache_warns_and_still_builds(tmp_path, monkeypatch):
    kernels = scratch_kernels(monkeypatch, tmp_path)
    (kernels / "k.cu").write_text(KERNEL)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(b.CACHE_ENV, str(blocker / "cache"))   # a directory cannot be made under a file
    with pytest.warns(UserWarning, match="not writable"):
        comp = compile_source(KernelSource("k.cu"))
    assert "k" in comp.report
