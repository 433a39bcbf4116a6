"""Chapter 13's Hopper GEMM as collectives: op ``hgemm``, version v9 ``collective``.

Chapter 12's v8 (TMA + wgmma, a producer and two consumer warpgroups, a persistent grid of 2-CTA clusters
sharing B by multicast, a TMA-store epilogue) taken apart into the pieces CUTLASS 3.x names, each a header in
this folder that chapters 17-18 reuse for attention:

- ``pipeline.cuh``: the stage ring, ``TmaPipeline`` (full/empty mbarriers, producer_acquire, consumer_wait,
  consumer_release) and the ring position ``PipeState`` that runs on across tiles;
- ``mainloop.cuh``: ``MainloopTmaWgmma``, the producer's TMA loads (multicast over a cluster) and the
  consumers' wgmma loop;
- ``epilogue.cuh``: ``EpilogueTmaStore``, accumulators to C through swizzled staging tiles and TMA stores;
- ``scheduler.cuh``: ``PersistentScheduler``, the grouped order of the cluster's tiles;

and ``v09_collective.cu``, the kernel that assembles them: what v8 computes, in the same order. The headers
include chapter 12's ``hopper_common.cuh`` (descriptors, wgmma_stage, the epilogue's staging writes), so the
source adds ``kernels/hgemm`` to its include path. Plans, validation, the TMA maps and the fallbacks are
chapter 12's (:mod:`kernels.hgemm`); importing this package never needs a GPU.
"""
from __future__ import annotations

import dataclasses

from kernels import hgemm as H
from kernels.sgemm import tile_name as instance
from utils.build import KernelSource
from utils.paths import KERNELS
from utils.version import Launch, Registry, Version

V9_CONFIG = H.V8_CONFIG


def v9_name(c) -> str:
    return instance("hgemm_v9_collective", c.bn, c.stages, c.group_m)


V9_SOURCE = KernelSource("gemm_sm90/v09_collective.cu", requires=(*H.HOPPER_REQUIRES, "clusters"),
                         name_expressions=(v9_name(V9_CONFIG),), include_dirs=(str(KERNELS / "hgemm"),))


def plan_v9(p: H.Problem, c) -> list[Launch]:
    """v8's plan (shared memory, persistent 2-CTA clusters, the TMA maps of A, B and C) with v9's kernel; v8's
    fallbacks where TMA cannot write C (v7) or read A and B (padded copies and v3)."""
    launches = H.plan_v8(p, c)
    if H.is_fallback(launches) or launches[0].kernel != H.v8_name(c):
        return launches
    (ln,) = launches
    return [dataclasses.replace(ln, kernel=v9_name(c), source=V9_SOURCE)]


# Chapter 12's v8 (the parent, for the diff and the timings side by side) and v9.
COLLECTIVE = Registry("hgemm", H.problem, [
    dataclasses.replace(H.HGEMM["v8_tma_store"], parent=None),
    Version("hgemm_v9_collective",
            "chapter 12's v8 assembled from collectives: a TMA pipeline, a wgmma mainloop, a TMA-store epilogue "
            "and a persistent tile scheduler, as CUTLASS 3.x divides a kernel",
            V9_SOURCE, plan_v9, parent="v8_tma_store", snippet="hgemm_v9", configs=(V9_CONFIG,),
            default=lambda p: V9_CONFIG),
])
