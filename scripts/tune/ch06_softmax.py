"""Chapter 6 tuning batch, round 5: per bar shape the current dispatch (S.dispatch) and the newest candidates
only (every v9_stream, v10_cluster_once and v11_early_arrive instance that fits: capacity in [cols, 2
cols); v10 and v11 on the same instances, so the split exit barrier is timed side by side), vs
torch.softmax (and torch.compile unless --no-compile), fp32 and bf16; plus a plain device copy of the same
bytes (cudaMemcpyAsync through utils.hardware.copy_gbps, same bench) with its GB/s and its share of the 1
GiB copy ceiling, to show what a copy of this size itself reaches (fixed launch cost). --all times every
register version and every v5-v11 instance that fits, as rounds 1-2 did. Each row also prints the ptxas
registers, resident blocks per SM and KiB of rows resident (v9: in flight) per SM; v9 names carry the
persistent grid's cluster count G. Budget: about 100 s on the H200 with --no-compile. Run from the repo
root: python scripts/tune/ch06_softmax.py [--dtypes float32,bfloat16] [--no-compile] [--all] [--shapes
8192x1024,...]. Writes $OUT/tune_ch06_softmax.json when OUT is set. One row per (candidate, shape, dtype),
then the best candidate per shape and the geomean of the best over torch."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from kernels import softmax as S  # noqa: E402
from utils.arrays import as_torch, from_torch  # noqa: E402
from utils.bench import bench  # noqa: E402
from utils.hardware import copy_gbps  # noqa: E402
from utils.check import assert_close, poisoned  # noqa: E402

SHAPES = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]
NP_DTYPE = {d.name: d for d in S.dtypes()}
BENCH = dict(target_ms=30, max_reps=50)
T0 = time.perf_counter()




NEW = ("v9_stream", "v10_cluster_once", "v11_early_arrive")   # the newest: every instance that fits is timed


def fitting(label: str, cols: int, dt) -> list:
    """The instances of a version that hold a row of ``cols`` within a factor 2 (larger ones leave threads
    idle)."""
    return [c for c in S.all_configs(label, dt) if cols <= S.capacity(label, c, dt) < 2 * cols]


def candidates(cols: int, dt, every: bool = False):
    """(name, label, config): the newest versions' instances and the dispatch; with ``every`` also the
    versions without configs that hold the row, v2-v4's defaults, and every tuned instance that fits."""
    labels = [lab for lab in S.VERSIONS if lab in S.DEFAULTS] if every else list(NEW)
    out = [(f"{lab}{list(c)}", lab, c) for lab in labels for c in fitting(lab, cols, dt)]
    return out + [("dispatch", None, None)]


def residency(label, shape, dt, cfg):
    """(registers, resident blocks per SM, KiB of rows resident per SM): ptxas through utils.occupancy."""
    r = S.resident(label, S.shape_problem(*shape, dt), cfg)
    return r.registers, r.blocks, r.bytes_per_sm / 1024


def stream_grid(shape, dt, cfg):
    """Clusters of v9's persistent grid as launched (the driver's cuOccupancyMaxActiveClusters)."""
    from utils.occupancy import clusters_per_device
    v = S.VERSIONS["v9_stream"]
    (ln,) = v.launches(S.shape_problem(*shape, dt), cfg)
    fit = clusters_per_device(v.source.function(ln.kernel), ln.threads, ln.smem, ln.cluster)
    return min(shape[0], fit) if fit else shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--shapes", default=",".join(f"{r}x{c}" for r, c in SHAPES))
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--all", action="store_true", help="every version and instance (rounds 1-2)")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    import torch

    t = time.perf_counter()
    for src in S.VERSIONS.sources():                    # one NVRTC compile per version's file
        src.function(src.name_expressions[0])
    print(f"# NVRTC compile of {len(S.name_expressions())} instances: {time.perf_counter() - t:.1f} s", flush=True)
    copy = copy_gbps(target_ms=100)
    print(f"# copy ceiling (1 GiB, read + write): {copy:.0f} GB/s", flush=True)
    rows, best = [], {}
    print(f"{'candidate':32s} {'shape':>12s} {'dtype':>8s} {'us':>8s} {'GB/s':>7s} {'copy':>6s} "
          f"{'vs_eager':>8s} {'vs_comp':>8s} {'regs':>4s} {'blk/SM':>6s} {'KiB/SM':>6s}")
    for shape in shapes:
        for dn in args.dtypes.split(","):
            dt = NP_DTYPE[dn]
            nbytes = S.nbytes(*shape, itemsize=np.dtype(dt).itemsize)
            x, _ = S.random_input(shape, dt, seed=6)
            ref = S.reference(x)
            tx = as_torch(x)
            peer_us = {}
            peers = [("torch.softmax", lambda t_: torch.softmax(t_, dim=-1))]
            if not args.no_compile:
                torch._dynamo.reset()
                peers.append(("torch.compile", torch.compile(lambda t_: torch.softmax(t_, dim=-1), dynamic=False)))
            for name, fn in peers:
                try:
                    box = {}
                    box["y"] = fn(tx)
                    assert_close(from_torch(box["y"]), ref, dtype=dn, name=name)
                    tm = bench(lambda fn=fn: box.__setitem__("y", fn(tx)), **BENCH)
                    peer_us[name] = tm.ms * 1e3
                except Exception as exc:          # a peer failing must not stop the batch
                    print(f"{name:32s} {shape!s:>12s} {dn:>8s} ERROR {type(exc).__name__}: {exc}")
            try:
                cgbs = copy_gbps(x.nbytes, **BENCH)      # a copy of the same bytes, same bench
                cus, cfrac = 2 * x.nbytes / cgbs / 1e3, cgbs / copy
                print(f"{'copy(same bytes)':32s} {str(shape):>12s} {dn:>8s} {cus:8.1f} {cgbs:7.0f} {cfrac:6.1%} "
                      f"(of the 1 GiB copy)", flush=True)
                rows.append(dict(candidate="copy(same bytes)", shape=list(shape), dtype=dn, us=cus, gbs=cgbs,
                                 frac_copy=cfrac, peer=True))
            except Exception as exc:
                print(f"{'copy(same bytes)':32s} {shape!s:>12s} {dn:>8s} ERROR {type(exc).__name__}: {exc}")
            for name in peer_us:
                gbs = nbytes / (peer_us[name] * 1e-6) / 1e9
                print(f"{name:32s} {str(shape):>12s} {dn:>8s} {peer_us[name]:8.1f} {gbs:7.0f} {gbs / copy:6.1%}")
                rows.append(dict(candidate=name, shape=list(shape), dtype=dn, us=peer_us[name], gbs=gbs,
                                 frac_copy=gbs / copy, peer=True))
            for name, version, cfg in candidates(shape[1], dt, args.all):
                try:
                    y = poisoned(shape, dt)
                    if version is None:
                        run = lambda y=y: S.softmax(x, out=y)        # noqa: E731
                        chosen = S.dispatch(*shape, dt)
                        cfg_c = S.VERSIONS[chosen].resolve_config(S.shape_problem(*shape, dt))
                        name = f"dispatch({chosen}{list(cfg_c) if cfg_c else ''})"
                        occ = residency(chosen, shape, dt, cfg_c) if chosen != "v1_online" else (0, 0, 0)
                    else:
                        run = S.VERSIONS[version].bind(x, y, config=cfg)
                        occ = residency(version, shape, dt, cfg)
                        if version == "v9_stream":
                            name = f"{name} G={stream_grid(shape, dt, cfg)}"
                    run()
                    assert_close(y, ref, dtype=dn, name=name)
                    tm = bench(run, check=lambda y=y: assert_close(y, ref, dtype=dn, name=name), **BENCH)
                except AssertionError as exc:
                    print(f"{name:32s} {str(shape):>12s} {dn:>8s} FAIL {str(exc).splitlines()[0][:120]}")
                    continue
                except Exception as exc:
                    print(f"{name:32s} {str(shape):>12s} {dn:>8s} ERROR {type(exc).__name__}: {exc}")
                    traceback.print_exc(limit=2)
                    continue
                us = tm.ms * 1e3
                gbs = nbytes / (us * 1e-6) / 1e9
                ve = peer_us.get("torch.softmax", float("nan")) / us
                vc = peer_us.get("torch.compile", float("nan")) / us
                print(f"{name:32s} {str(shape):>12s} {dn:>8s} {us:8.1f} {gbs:7.0f} {gbs / copy:6.1%} "
                      f"{ve:7.2f}x {vc:7.2f}x {occ[0]:4d} {occ[1]:6d} {occ[2]:6.0f}", flush=True)
                row = dict(candidate=name, shape=list(shape), dtype=dn, us=us, gbs=gbs, frac_copy=gbs / copy,
                           vs_torch=ve, vs_compile=vc, regs=occ[0], blocks_per_sm=occ[1], kib_per_sm=occ[2],
                           peer=False)
                rows.append(row)
                if (shape, dn) not in best or us < best[shape, dn]["us"]:
                    best[shape, dn] = row
            cupy.get_default_memory_pool().free_all_blocks()
    print("# best per shape (bar: >= 75% of copy; goal: >= 88% and >= 1.0x torch.compile)")
    speedups = []
    for (shape, dn), r in best.items():
        speedups.append(r["vs_torch"])
        print(f"BEST {str(shape):>12s} {dn:>8s} {r['candidate']:32s} {r['frac_copy']:6.1%} "
              f"{r['vs_torch']:.2f}x torch {r['vs_compile']:.2f}x compile "
              f"{'bar ok' if r['frac_copy'] >= 0.75 else 'BAR MISS'}")
    if speedups:
        print(f"# geomean of best over torch.softmax: {math.exp(sum(map(math.log, speedups)) / len(speedups)):.2f}x;"
              f" total {time.perf_counter() - T0:.0f} s")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "tune_ch06_softmax.json").write_text(json.dumps(
            dict(copy_gbs=copy, rows=rows, best=[dict(r) for r in best.values()]), indent=1))


if __name__ == "__main__":
    main()
