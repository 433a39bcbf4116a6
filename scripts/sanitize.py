"""compute-sanitizer over an op family's versions on a GPU host: every version launched on small odd shapes
(fresh seeded inputs, outputs poisoned and checked against the float64 reference) under memcheck, racecheck,
synccheck and initcheck, one child process per tool. Writes one line per tool and a JSON summary.

    python scripts/sanitize.py hgemm sgemm --out gpu_out        # all four tools
    python scripts/sanitize.py hgemm --tools memcheck racecheck

The child (``python scripts/sanitize.py --child OP``) is what the sanitizer runs. A tool passes when the child
exits 0 and the sanitizer reports "ERROR SUMMARY: 0 errors". Without compute-sanitizer the script says so and
exits 2.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# Small shapes with tails in every dimension: the tools slow a kernel down a hundredfold and more. The hgemm
# shapes include two that TMA can read (K and N multiples of 8), so v4 on run their own kernels too.
SHAPES = {
    "hgemm": [(1, 1, 1), (33, 65, 7), (37, 199, 183), (129, 264, 72), (256, 512, 320)],
    "sgemm": [(1, 1, 1), (33, 65, 7), (37, 199, 183), (129, 260, 36)],
    # chapter 13: v8 and v9 (the collectives) on hgemm's shapes; the W4A16 wgmma GEMM on (M, K, N) with a tail
    # slice, one group and several, stream-K splits
    "gemm_sm90": [(1, 1, 1), (37, 199, 183), (129, 264, 72), (256, 512, 320)],
    "w4a16_wgmma": [(1, 128, 32), (5, 384, 288), (17, 1152, 96), (37, 256, 1056)],
    # chapter 15: (B, Hq, Hkv, Sq, Sk, D, causal) with partial row and key tiles, GQA, decode, causal rows that
    # see no key (Sq > Sk)
    "attention": [(1, 1, 1, 1, 1, 64, 0), (1, 2, 1, 17, 17, 64, 1), (1, 2, 2, 70, 130, 128, 1),
                  (1, 2, 1, 100, 33, 128, 1), (2, 1, 1, 1, 200, 64, 1), (1, 1, 1, 65, 200, 64, 0)],
    # chapter 16: the backward on the same kind of shapes (partial key and query tiles, GQA summed in dK/dV,
    # causal rows that see no key, one query against many keys)
    "attention_bwd": [(1, 1, 1, 1, 1, 64, 0), (1, 2, 1, 17, 17, 64, 1), (1, 2, 2, 70, 130, 128, 1),
                      (1, 2, 1, 100, 33, 128, 1), (1, 1, 1, 1, 200, 64, 1)],
    # chapters 15-16's variable-length entries: (Hq, Hkv, D, causal, *lengths) with an empty sequence, one token and
    # partial tiles; make_varlen runs the forward's varlen kernel too, so the sanitizer watches both directions
    "attention_varlen": [(2, 1, 64, 1, 1, 0, 149, 13), (2, 2, 128, 0, 70, 5, 130)],
}


def cases(op: str):
    """(registry, make(shape, rng) -> utils.ladder.Case, reference(case), tolerance dtype) of an op family."""
    import numpy as np
    if op in ("hgemm", "gemm_sm90"):
        from kernels.hgemm import HGEMM, reference
        from kernels.hgemm.ladders import make
        from utils.arrays import bf16
        registry = HGEMM
        if op == "gemm_sm90":
            from kernels.gemm_sm90 import COLLECTIVE as registry
        return registry, lambda s, rng: make(s, bf16(), rng), lambda case: reference(*case.args[:2]), "bfloat16"
    if op == "sgemm":
        from kernels.sgemm import SGEMM, reference
        from kernels.sgemm.ladders import make
        return (SGEMM, lambda s, rng: make(s, np.dtype("float32"), rng), lambda case: reference(*case.args[:2]),
                "float32")
    if op == "w4a16_wgmma":
        from kernels.w4a16_sm90 import W4A16_WGMMA
        from kernels.w4a16_sm90.ladder import make, reference
        return W4A16_WGMMA, lambda s, rng: make(s, "bfloat16", rng), reference, "bfloat16"
    if op == "attention":
        from kernels.attention import ATTN_FWD
        from kernels.attention.ladders import ladder_reference, make
        return ATTN_FWD, lambda s, rng: make(s, "bfloat16", rng), ladder_reference, "bfloat16"
    if op == "attention_varlen":
        from kernels.attention_bwd import ATTN_BWD_VARLEN
        from kernels.attention_bwd.ladders import make_varlen, varlen_ladder_reference
        return ATTN_BWD_VARLEN, lambda s, rng: make_varlen(s, "bfloat16", rng), varlen_ladder_reference, "bfloat16"
    if op == "attention_bwd":
        from kernels.attention_bwd import ATTN_BWD
        from kernels.attention_bwd.ladders import ladder_reference, make
        return ATTN_BWD, lambda s, rng: make(s, "bfloat16", rng), ladder_reference, "bfloat16"
    raise SystemExit(f"unknown op {op!r}; expected one of {sorted(SHAPES)}")


def child(op: str) -> int:
    """Run every version the GPU supports once per shape and check it; print one line per launch."""
    import numpy as np

    from utils.check import assert_close, poison
    registry, make, reference, dtype = cases(op)
    for v in registry.runnable():
        for shape in SHAPES[op]:
            case = make(shape, np.random.default_rng(sum(shape)))
            outs = [case.args[i] for i in case.outputs]     # the backward writes three (dq, dk, dv)
            for o in outs:
                poison(o)
            v(*case.args, **case.kwargs)
            refs = reference(case)
            refs = refs if len(outs) > 1 else [refs]
            for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
                assert_close(o, r, dtype=dtype, name=f"{v.label} {shape} output {i}")
            print(f"ok {v.label} {'x'.join(map(str, shape))}", flush=True)
    return 0


# memcheck, synccheck and initcheck end with "ERROR SUMMARY: n errors"; racecheck with "RACECHECK SUMMARY: ...
# (n errors, m warnings)"
SUMMARY = re.compile(r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: .*\((\d+) error)")
# CUDA API errors are left out of the count: cuda-bindings asks the driver (cuGetProcAddress) for entry points
# this driver may not have, which memcheck reports as errors, while a failing call of ours raises in Python anyway.
TOOL_OPTIONS = ["--report-api-errors", "no"]


def run_tool(tool: str, op: str, sanitizer: str, timeout_s: int) -> dict:
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "86", "--print-limit", "20", *TOOL_OPTIONS,
           sys.executable, str(Path(__file__).resolve()), "--child", op]
    start = time.time()
    try:
        p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {timeout_s} s", None
    m = SUMMARY.findall(out)
    errors = int(next(n for n in m[-1] if n)) if m else None
    launches = sum(1 for ln in out.splitlines() if ln.startswith("ok "))
    return {"op": op, "tool": tool, "rc": rc, "errors": errors, "launches": launches,
            "seconds": round(time.time() - start, 1), "passed": rc == 0 and errors == 0,
            "tail": out if len(out) <= 8000 else out[:4000] + "\n[...]\n" + out[-4000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="*", default=["hgemm"])
    ap.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    ap.add_argument("--child", metavar="OP", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=Path("gpu_out"))
    ap.add_argument("--timeout-s", type=int, default=600, help="per tool and op")
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    sanitizer = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if Path(p).exists()), None)
    if sanitizer is None:
        print("compute-sanitizer is not on PATH nor in /usr/local/cuda/bin: nothing checked")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for op in args.ops:
        for tool in args.tools:
            r = run_tool(tool, op, sanitizer, args.timeout_s)
            results.append(r)
            print(f"{op} {tool}: {'clean' if r['passed'] else 'NOT CLEAN'} ({r['errors']} errors, rc {r['rc']}, "
                  f"{r['launches']} launches checked, {r['seconds']} s)", flush=True)
            (args.out / f"sanitize-{op}-{tool}.log").write_text(r["tail"])
    (args.out / "sanitize.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "tail"}
                                                        for r in results], indent=1) + "\n")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
