"""Chapter 6 tuning batch, round 5: per bar shape the current dispatch (S.plan) and the newest candidates
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
from utils.bench import bench  # noqa: E402
from utils.hardware import copy_gbps  # noqa: E402
from utils.check import assert_close, poisoned  # noqa: E402

SHAPES = [(8192, 1024), (8192, 4096), (4096, 16384), (1024, 65536), (128, 262144)]
NP_DTYPE = {"float32": np.float32, "bfloat16": S.BF16}
BENCH = dict(target_ms=30, max_reps=50)
T0 = time.perf_counter()




NEW = ("v9_stream", "v10_cluster_once", "v11_early_arrive")   # the newest: every instance that fits is timed
# (v10 and v11 run on v6's instances; instances added to S.V10_EXTRA / S.V11_EXTRA are picked up here)


def candidates(cols: int, dt, every: bool = False):
    """(name, version, config): the dispatch and the new versions' instances; with ``every`` the fixed
    versions that hold the row too, then every raw instance whose capacity fits the row within a factor 2
    (larger ones leave threads idle)."""
    if not every:
        out = [(f"{v}{list(c)}", v, c) for v in NEW for c in S.raw_configs(v, dt)
               if cols <= S.capacity(v, dt, c) < 2 * cols]
        return out + [("dispatch", None, None)]
    out = [(v, v, None) for v in ("v2_warp_row", "v3_block_row") if S.supports(v, cols, dt)]
    if cols > S.max_cols("v3_block_row", dt):
        out.append(("v4_cluster_row", "v4_cluster_row", None))
    for version in S.RAW_TABLES:
        for cfg in S.raw_configs(version, dt):
            if cols <= S.capacity(version, dt, cfg) < 2 * cols:
                out.append((f"{version}{list(cfg)}", version, cfg))
    out.append(("dispatch", None, None))
    return out


def residency(version, shape, dt, cfg):
    """(registers, resident blocks per SM, KiB of rows resident per SM) from the ptxas report."""
    from kernels.simt import occupancy_estimate
    from utils.build import compile_source
    comp = compile_source(S.SOURCE)
    (ln,) = S.geometry(version, *shape, dt, cfg)
    regs = comp.report[comp.symbols[ln.kernel]]["registers"]
    blocks = occupancy_estimate(regs, ln.block[0])
    if version == "v9_stream":                 # the double buffer bounds it too
        blocks = min(blocks, S.stream_ctas_per_sm(dt, S.raw_config(version, shape[1], dt, cfg)))
    return regs, blocks, blocks * S.block_row_bytes(ln, shape[1], dt) / 1024


def stream_grid(shape, dt, cfg):
    """Clusters of v9's persistent grid as launched (lowered to what the driver says fits at once)."""
    (ln,) = S.geometry("v9_stream", *shape, dt, cfg)
    ln = S._resident(ln, S._function(ln))
    return ln.grid[0] // ln.cluster


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
    S.SOURCE.function(S.name_expressions()[0])          # one NVRTC compile of every instance
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
            x = S.random_input(shape, dt)
            ref = S.reference(x)
            tx = S.as_torch(x)
            peer_us = {}
            peers = [("torch.softmax", lambda t_: torch.softmax(t_, dim=-1))]
            if not args.no_compile:
                torch._dynamo.reset()
                peers.append(("torch.compile", torch.compile(lambda t_: torch.softmax(t_, dim=-1), dynamic=False)))
            for name, fn in peers:
                try:
                    box = {}
                    box["y"] = fn(tx)
                    assert_close(S.from_torch(box["y"]), ref, dtype=dn, name=name)
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
                        chosen = S.plan(*shape, dt)
                        cfg_c = S.raw_config(chosen, shape[1], dt) if chosen in S.RAW_TABLES else None
                        name = f"dispatch({chosen}{list(cfg_c) if cfg_c else ''})"
                        occ = residency(chosen, shape, dt, cfg_c)
                    else:
                        run = S.bind(version, x, y, cfg)
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
