"""The performance targets of ../shared/TARGETS.md, as same-run ratios read from the results record.

    python3 scripts/targets_report.py                  # the record in results/nvidia-h200/
    python3 scripts/targets_report.py --rev aeefc97    # and the record at an earlier commit, side by side

Every ratio is taken within one notebook's run (a kernel and its peer or the copy of the same run). Where
a chapter picks a kernel per shape, the best version timed on that shape stands for it.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GPU = "nvidia-h200"
NORM_SHAPES = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]


def load(notebook: str, rev: str | None) -> list[dict]:
    rel = f"results/{GPU}/{notebook}.json"
    if rev is None:
        return json.loads((REPO / rel).read_text())["entries"]
    out = subprocess.run(["git", "show", f"{rev}:{rel}"], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout)["entries"]


def metric(entries, op=None, impl=None, dtype=None, shape=None) -> float | None:
    hits = [e["metric"] for e in entries if (op is None or e["op"] == op) and (impl is None or e["impl"] == impl)
            and (dtype is None or e["dtype"] == dtype) and (shape is None or e["shape"] == list(shape))]
    return max(hits) if hits else None


def best_version(entries, op, dtype, shape) -> float | None:
    """The best non-peer entry of ``op`` on one shape (dispatchers pick the tuned best)."""
    hits = [e["metric"] for e in entries if e["op"] == op and not e["is_peer"] and e["dtype"] == dtype
            and e["shape"] == list(shape)]
    return max(hits) if hits else None


def copy_gbps(entries) -> float:
    return metric(entries, "copy", "ceiling.copy", shape=None) if any(e["op"] == "copy" for e in entries) else None


def ch02(E):
    return {"copy GB/s": metric(E, "copy", "ceiling.copy"), "FMA fp32 TFLOP/s": metric(E, impl="ceiling.fma_fp32"),
            "cuBLAS bf16 TFLOP/s (best)": metric(E, impl="cublas_bf16")}


def ch04(E):
    best = max(e["metric"] for e in E if e["op"].startswith("transpose") and not e["is_peer"]
               and e["shape"] == [8192, 8192])
    return {"transpose 8192^2 best / copy": best / copy_gbps(E)}


def ch05(E):
    op = next(e["op"] for e in E if e["impl"] == "cupy.sum")
    shape = [1 << 28]
    return {"sum 2^28 best / cupy.sum": best_version(E, op, "float32", shape) / metric(E, op, "cupy.sum", "float32", shape)}


def norm_like(E, op, peer, pick=None):
    out, ratios = {}, []
    copy = copy_gbps(E)
    for dt in ("float32", "bfloat16"):
        for s in NORM_SHAPES:
            ours = metric(E, op, pick, dt, s) if pick else best_version(E, op, dt, s)
            p = metric(E, op, peer, dt, s)
            if ours is None or p is None:
                continue
            out[f"{op} {dt} {s[0]}x{s[1]} of copy"] = ours / copy
            ratios.append(ours / p)
    out[f"{op} geomean vs {peer}"] = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return out


def ch06(E):
    return norm_like(E, "softmax", "torch.softmax", pick="dispatch")


def ch07(E):
    return {**norm_like(E, "layernorm", "torch.layer_norm"), **norm_like(E, "rmsnorm", "torch.rms_norm")}


def ch08(E):
    copy = copy_gbps(E)
    out = {}
    for op in ("bias_gelu", "swiglu", "add_rmsnorm", "rope"):
        best = max(e["metric"] for e in E if e["op"] == op and not e["is_peer"])
        out[f"{op} best of copy"] = best / copy
        out[f"{op} best vs torch.compile"] = best / metric(E, op, "torch.compile")
    return out


def ch09(E):
    out = {}
    for op, impls in (("w4a16_gemv", None), ("w4a16_gemm", None)):
        for e in E:
            if e["op"] == op and e["impl"] == "cublas_bf16":
                t_ref = e["ms"]
                ours = [x["ms"] for x in E if x["op"] == op and x["shape"] == e["shape"] and not x["is_peer"]]
                if ours:
                    out[f"{op} {'x'.join(map(str, e['shape']))} best vs cuBLAS"] = t_ref / min(ours)
    return out


def gemm_ratios(E, op, dtype, peer, labels, shapes):
    """metric(label) / metric(peer) on each shape, where both were recorded in the run."""
    out = {}
    for label in labels:
        for shape in shapes:
            ours, ref = metric(E, op, label, dtype, shape), metric(E, op, peer, dtype, shape)
            if ours is not None and ref is not None:
                out[f"{label} {'x'.join(map(str, shape))} / {peer}"] = ours / ref
    return out


def ch10(E):
    s = (2048, 2048, 2048)
    return {f"{peer} / {label} 2048^3": metric(E, "sgemm", peer, "float32", s) / metric(E, "sgemm", label, "float32", s)
            for label in ("v0_uncoalesced", "v1_coalesced") for peer in ("cupy.matmul",)}


def ch11(E):
    return gemm_ratios(E, "sgemm", "float32", "cupy.matmul", ["v9_tuned"],
                       [(4096, 4096, 4096), (8192, 12288, 4096), (8192, 11008, 4096)])


def ch12(E):
    labels = ["v3_pipeline", "v4_wgmma", "v5_warp_specialized", "v6_persistent", "v7_multicast", "v8_tma_store"]
    out = gemm_ratios(E, "hgemm", "bfloat16", "cupy.matmul", labels, [(4096, 4096, 4096), (8192, 8192, 8192)])
    out.update(gemm_ratios(E, "hgemm", "bfloat16", "cupy.matmul", labels, [(4095, 4097, 4095)]))
    return out


CHAPTERS = {"02-hopper-architecture": ch02, "04-memory-hierarchy": ch04, "05-reduction": ch05,
            "06-online-softmax": ch06, "07-layernorm": ch07, "08-fusion": ch08, "09-quantization": ch09,
            "10-naive-gemm": ch10, "11-tiled-gemm": ch11, "12-tensor-core": ch12}


def report(rev: str | None) -> dict[str, float]:
    out = {}
    for nb, fn in CHAPTERS.items():
        try:
            out.update({f"ch{nb[:2]} {k}": v for k, v in fn(load(nb, rev)).items()})
        except FileNotFoundError:
            continue                      # not run on this GPU yet
        except (StopIteration, ValueError, KeyError, TypeError, subprocess.CalledProcessError) as e:
            out[f"ch{nb[:2]} (unreadable: {type(e).__name__})"] = float("nan")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", help="also read the record at this git revision and show the change")
    args = ap.parse_args(argv)
    now = report(None)
    then = report(args.rev) if args.rev else {}
    for k, v in now.items():
        old = then.get(k)
        line = f"{k:60s} {v:10.3f}"
        if old is not None:
            line += f" {old:10.3f}  {v / old - 1:+6.1%}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
