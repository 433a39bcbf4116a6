"""Chapter 13's collective GEMM (kernels/gemm_sm90, hgemm v9) on the CPU, through chapter 12's emulation
(tests/test_hgemm_emulated.py: the same driver, cases and TMA policies): v9 must compute what v8 computes on
tails, misaligned pointers, more k-tiles than stages and more tiles than persistent clusters, and the
emulation must catch a broken pipeline, mainloop or scheduler. Skipped without g++ (C++20)."""
import pytest

from kernels.gemm_sm90 import COLLECTIVE
from tests.build_helpers import emulated_source
from tests.test_hgemm_emulated import TMA_POLICIES, build_and_run
from utils.paths import KERNELS

FOLDERS = ("hgemm", "gemm_sm90")


@pytest.mark.parametrize("policy", TMA_POLICIES)
def test_v9_on_the_cpu(tmp_path, policy):
    rc, out, n = build_and_run(tmp_path, [COLLECTIVE["v9_collective"]], policy=policy, folders=FOLDERS)
    assert rc == 0 and f"{n} runs, 0 failures" in out, out[-3000:]


MUTANTS = {
    # the ring position forgets to flip its parity when it wraps: the second pass waits on the wrong phase
    "parity never flips": ("pipeline.cuh", [("            phase ^= 1;\n", "")]),
    # a consumer frees the stage its newest wgmma group may still be reading
    "release the live stage": ("mainloop.cuh", [("if (signals) pipe.consumer_release(previous, peer);\n                previous",
                                                 "if (signals) pipe.consumer_release(st, peer);\n                previous")]),
    # the clusters stride by the number of CTAs instead of clusters: some tiles are computed twice, others never
    "scheduler stride": ("scheduler.cuh", [("group += gridDim.x / CTAS;", "group += gridDim.x;")]),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_emulation_catches(tmp_path, mutant):
    file, edits = MUTANTS[mutant]
    text = emulated_source(KERNELS / "gemm_sm90" / file)
    for old, new in edits:
        assert old in text, f"the mutant {mutant!r} no longer applies: {old!r} is not in {file}"
        text = text.replace(old, new)
    rc, out, n = build_and_run(tmp_path, [COLLECTIVE["v9_collective"]], {file: text}, timeout_s=120, folders=FOLDERS)
    assert rc != 0 and f"{n} runs, 0 failures" not in out, f"the mutant {mutant!r} passed:\n{out[-2000:]}"
