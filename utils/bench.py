"""Timing on the GPU: CUDA events around each repetition, warm-up, median, L2 flushed between runs.

The flush reads (never writes) a buffer twice the L2's size, so the next timed run finds none of its
inputs in L2 and no dirty lines of ours to write back while it runs. The other side of that coin: up
to an L2's worth of a timed kernel's own writes may still be dirty when its end event fires, so
compare write-heavy kernels with a peer (or the copy ceiling) measured the same way, on sizes many
times the L2, as every chapter does.
"""
from __future__ import annotations

import functools
import time

from .gpu import require_gpu
from .stats import Timing

# A read-only sweep: the loads cannot be dropped because their xor may be stored.
_FLUSH_SRC = r"""
extern "C" __global__ void l2_flush_read(const int4* __restrict__ p, unsigned long long n, int* sink) {
    int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        int4 v = __ldcg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) *sink = acc;  // practically never true; keeps the loads alive
}

// Keeps the GPU busy for `ns` nanoseconds, so that the host-side work of the launcher under test
// (argument checks, Python dispatch) happens while the GPU still has queued work, not inside the
// timed region.
extern "C" __global__ void gpu_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""

SPIN_NS = 50_000  # longer than the host overhead of any launcher in the book


class _GpuHelpers:
    """The L2 flush sweep and the spin kernel, built once per process."""

    def __init__(self):
        import cupy
        from .gpu import device_summary
        d = device_summary()
        n16 = max(2 * d["l2_bytes"], 16 << 20) // 16
        self.buf = cupy.random.randint(1, 2**31 - 1, size=n16 * 4, dtype=cupy.int32)
        self.sink = cupy.zeros(1, dtype=cupy.int32)
        self.kernel = cupy.RawKernel(_FLUSH_SRC, "l2_flush_read")
        self.spin = cupy.RawKernel(_FLUSH_SRC, "gpu_spin")
        self.n16 = n16
        self.grid = d["sms"] * 8

    def __call__(self):
        import numpy as np
        self.kernel((self.grid,), (256,), (self.buf, np.uint64(self.n16), self.sink))

    def hold(self, ns: int = SPIN_NS):
        import numpy as np
        self.spin((1,), (1,), (np.uint64(ns),))


@functools.lru_cache(maxsize=None)
def _flusher() -> _GpuHelpers:
    return _GpuHelpers()


def flush_l2() -> None:
    _flusher()()


def bench(fn, *, flush: bool = True, warmup: int = 3, reps: int | None = None,
          target_ms: float = 300.0, max_reps: int = 200, min_reps: int = 10, check=None) -> Timing:
    """Time ``fn()`` (which launches GPU work) and return the median of many repetitions.

    Each repetition is bracketed by its own pair of events on the current stream; the L2 is flushed
    before each one unless ``flush=False`` (for measuring cache-resident behaviour on purpose), and a
    short spin kernel ahead of the start event hides the host-side cost of ``fn``'s launch.
    ``reps`` defaults to as many as fit in ``target_ms`` of measured time, within [min_reps, max_reps].
    ``check()``, if given, runs after timing, so the timed output is verified too.
    """
    require_gpu()
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    if reps is None:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        est = max(cupy.cuda.get_elapsed_time(start, end), 1e-3)
        reps = int(min(max_reps, max(min_reps, target_ms / est)))
    gpu = _flusher()
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    for s, e in events:
        if flush:
            gpu()
        gpu.hold()  # the launcher's host work below overlaps this, so it stays out of the timing
        s.record()
        fn()
        e.record()
    events[-1][1].synchronize()
    samples = [cupy.cuda.get_elapsed_time(s, e) for s, e in events]
    if check is not None:
        check()
    return Timing.of(samples)


def host_time(fn, reps: int = 50) -> Timing:
    """Wall-clock time of a host-side call that synchronizes itself (launch-latency experiments)."""
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return Timing.of(samples)
