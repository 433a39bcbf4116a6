"""scripts/sanitize.py on a CPU: the verdict per tool from a stand-in for compute-sanitizer (a shell script that
prints what the real one prints), and the child's cases for each op family."""
import importlib.util
import os
import stat

import pytest

from utils.paths import REPO


def load():
    spec = importlib.util.spec_from_file_location("sanitize_script", REPO / "scripts" / "sanitize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_sanitizer(tmp_path, text: str, rc: int):
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"#!/bin/sh\necho 'ok v0_wmma 1x1x1'\necho '{text}'\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize("text,rc,passed,errors", [("========= ERROR SUMMARY: 0 errors", 0, True, 0),
                                                   ("========= ERROR SUMMARY: 3 errors", 86, False, 3),
                                                   ("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)",
                                                    0, True, 0),
                                                   ("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)",
                                                    86, False, 2),
                                                   ("Device not supported", 1, False, None)])
def test_a_tool_passes_only_with_exit_0_and_no_errors(tmp_path, text, rc, passed, errors):
    if os.name != "posix":
        pytest.skip("the stand-in is a shell script")
    r = load().run_tool("memcheck", "hgemm", fake_sanitizer(tmp_path, text, rc), timeout_s=30)
    assert (r["passed"], r["errors"], r["launches"]) == (passed, errors, 1)


def test_every_op_has_small_shapes_with_tails_and_tma_readable_ones():
    mod = load()
    assert set(mod.SHAPES) == {"hgemm", "sgemm", "gemm_sm90", "w4a16_wgmma", "attention", "attention_bwd",
                                "attention_varlen"}
    for op in ("hgemm", "gemm_sm90"):                                   # (M, N, K): v4 on need TMA-readable rows
        assert any(K % 8 == 0 and N % 8 == 0 for _, N, K in mod.SHAPES[op])
        assert any(K % 8 or N % 8 for _, N, K in mod.SHAPES[op])        # and the fallback
    gemms = mod.SHAPES["hgemm"] + mod.SHAPES["sgemm"] + mod.SHAPES["gemm_sm90"]
    assert all(M * N * K <= 256 * 512 * 320 for M, N, K in gemms)
    from kernels import w4a16_sm90 as W                                 # (M, K, N): the op's own rules
    for M, K, N in mod.SHAPES["w4a16_wgmma"]:
        W.check_shapes(M, K, N)
    assert any(N % 64 for _, _, N in mod.SHAPES["w4a16_wgmma"])         # a partial n64 slice
    from kernels import attention as A                                  # (B, Hq, Hkv, Sq, Sk, D, causal)
    for op in ("attention", "attention_bwd"):
        att = mod.SHAPES[op]
        for B, Hq, Hkv, Sq, Sk, D, _ in att:
            A.check_sizes(B, Hq, Hkv, Sq, Sk, D)
        assert any(Sq % A.MMA_BR and Sk % 64 for _, _, _, Sq, Sk, _, _ in att)    # partial row and key tiles
        assert any(c and Sq > Sk for *_, Sq, Sk, _, c in att)                      # causal rows that see no key
        assert {D for *_, D, _ in att} == set(A.HEAD_DIMS) and any(Hq > Hkv for _, Hq, Hkv, *_ in att)
    for Hq, Hkv, D, causal, *lengths in mod.SHAPES["attention_varlen"]:       # (Hq, Hkv, D, causal, *lengths)
        A.check_sizes(len(lengths), Hq, Hkv, max(lengths), max(lengths), D)
    lengths = [n for s in mod.SHAPES["attention_varlen"] for n in s[4:]]
    assert 0 in lengths and 1 in lengths and any(n > 128 and n % 64 for n in lengths)
    with pytest.raises(SystemExit, match="unknown op"):
        mod.cases("nope")
