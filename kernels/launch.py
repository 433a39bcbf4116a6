"""Chapter 3 host side: streams and events (copy/compute overlap) and the cost of a kernel launch.

Imports without a GPU: the reference, the pipeline model and argument checks are plain Python/NumPy;
CuPy is imported inside the functions that launch.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from utils.build import KernelSource
from utils.ops import expect_array

SOURCE = KernelSource("launch.cu")


CHUNK_THREADS = 256


# --- chunk work: a kernel of adjustable length ------------------------------------------------------------

def chunk_work_ref(x, iters: int):
    """v_k = 2x - x * 0.5**k after k steps of v <- 0.5 v + x from v_0 = x (float64)."""
    try:
        import cupy
        xp = cupy.get_array_module(x)
    except ImportError:
        xp = np
    x64 = x.astype(xp.float64)
    return 2.0 * x64 - x64 * (0.5 ** int(iters))


def chunk_work_flops(n: int, iters: int) -> int:
    """One FMA (2 FLOP) per step per element."""
    return 2 * int(n) * int(iters)


def launch_chunk_work(x, y, iters: int, *, blocks: int):
    """y = chunk_work(x) on the current stream, ``blocks`` blocks of 256 threads in a grid-stride loop."""
    expect_array(x, "x", dtype=np.float32, ndim=1, align=4)
    expect_array(y, "y", dtype=np.float32, shape=x.shape, align=4)
    if int(iters) < 0 or int(blocks) < 1:
        raise ValueError(f"need iters >= 0 and blocks >= 1, got {iters}, {blocks}")
    SOURCE.function("chunk_work")((int(blocks),), (CHUNK_THREADS,),
                                  (x, y, np.int64(x.shape[0]), np.int32(iters)))
    return y


# --- the copy/compute pipeline ----------------------------------------------------------------------------

def pipeline_model(chunks: int, copy_ms: float, kernel_ms: float, streams: int) -> float:
    """Makespan of `chunks` x (H2D copy, then kernel), chunk i on stream i % streams.

    One copy engine takes the copies in issue order; kernels fill the GPU, so they run one at a time;
    on each stream a copy waits for that stream's previous kernel. streams = 1 is the serial schedule.
    """
    if chunks < 1 or streams < 1:
        raise ValueError(f"need chunks >= 1 and streams >= 1, got {chunks}, {streams}")
    kern_end: list[float] = []
    copy_free = sm_free = 0.0
    for i in range(int(chunks)):
        ready = kern_end[i - streams] if i >= streams else 0.0
        copy_end = max(copy_free, ready) + copy_ms
        copy_free = copy_end
        k_end = max(copy_end, sm_free) + kernel_ms
        sm_free = k_end
        kern_end.append(k_end)
    return max(kern_end)


def _check_pipeline_args(h_x, d_x, d_y):
    if not isinstance(h_x, np.ndarray) or h_x.dtype != np.float32 or h_x.ndim != 2 \
            or not h_x.flags.c_contiguous:
        raise ValueError("h_x must be a C-contiguous 2-D float32 NumPy array in pinned memory "
                         "(cupyx.empty_pinned((chunks, n), numpy.float32))")
    expect_array(d_x, "d_x", dtype=np.float32, shape=h_x.shape, align=4)
    expect_array(d_y, "d_y", dtype=np.float32, shape=h_x.shape, align=4)


def run_pipeline(h_x, d_x, d_y, iters: int, streams, *, blocks: int):
    """Chunk i: copy h_x[i] to d_x[i] (cudaMemcpyAsync from pinned memory), then chunk_work into d_y[i],
    both on streams[i % len(streams)]. Everything is enqueued; nothing waits.

    Returns (start, marks, ends): the start event (every stream waits on it), per chunk the events
    (before copy, after copy, after kernel), and one end event per stream.
    """
    _check_pipeline_args(h_x, d_x, d_y)
    if not streams:
        raise ValueError("need at least one stream")
    import cupy
    chunks, n = h_x.shape
    fn = SOURCE.function("chunk_work")
    start = cupy.cuda.Event()
    start.record(streams[0])
    for s in streams[1:]:
        s.wait_event(start)
    marks = []
    for i in range(chunks):
        s = streams[i % len(streams)]
        e_copy, e_kernel, e_done = cupy.cuda.Event(), cupy.cuda.Event(), cupy.cuda.Event()
        e_copy.record(s)
        cupy.cuda.runtime.memcpyAsync(d_x[i].data.ptr, h_x[i].ctypes.data, n * 4,
                                      cupy.cuda.runtime.memcpyHostToDevice, s.ptr)
        e_kernel.record(s)
        with s:
            fn((int(blocks),), (CHUNK_THREADS,), (d_x[i], d_y[i], np.int64(n), np.int32(iters)))
        e_done.record(s)
        marks.append((e_copy, e_kernel, e_done))
    ends = []
    for s in streams:
        e = cupy.cuda.Event()
        e.record(s)
        ends.append(e)
    return start, marks, ends


def pipeline_times(start, marks, ends) -> tuple[float, np.ndarray]:
    """Wait for the pipeline; return its makespan (ms) and [chunks, 3] times (ms after start) of
    copy start, copy end = kernel enqueue point, kernel end."""
    import cupy
    for e in ends:
        e.synchronize()
    rows = np.array([[cupy.cuda.get_elapsed_time(start, e) for e in m] for m in marks])
    total = max(cupy.cuda.get_elapsed_time(start, e) for e in ends)
    return total, rows


@dataclasses.dataclass
class Pipeline:
    """The stream experiment's buffers and its two measured pieces: one H2D copy and one kernel of a chunk."""
    h_x: object        # [chunks, n] float32 in pinned host memory
    d_x: object
    d_y: object
    iters: int         # chunk_work's steps, chosen so that a kernel takes about as long as a copy
    blocks: int
    copy: dict         # the record's entry of one chunk's H2D copy (op h2d_copy)
    kernel: dict       # ... and of one chunk's kernel (op chunk_work)


def setup_pipeline(rec, chunks: int, n: int, *, blocks: int, seed: int = 57, probe_iters: int = 256) -> Pipeline:
    """Pinned random input of ``chunks`` x ``n`` floats and device buffers; time one chunk's H2D copy
    (op ``h2d_copy``), then size chunk_work's ``iters`` from a probe so that one kernel takes about as long
    as one copy, and time that kernel (op ``chunk_work``, impl ``chunk_work.iters<N>``), both checked."""
    import cupy
    import cupyx

    from utils.bench import bench
    from utils.check import assert_close
    h_x = cupyx.empty_pinned((chunks, n), np.float32)
    h_x[...] = np.random.default_rng(seed).standard_normal((chunks, n), dtype=np.float32)
    d_x = cupy.empty((chunks, n), dtype=cupy.float32)
    d_y = cupy.empty_like(d_x)

    def h2d_chunk0():
        cupy.cuda.runtime.memcpyAsync(d_x[0].data.ptr, h_x[0].ctypes.data, n * 4,
                                      cupy.cuda.runtime.memcpyHostToDevice, cupy.cuda.get_current_stream().ptr)

    e_copy = rec.time("h2d_copy", "cudaMemcpyAsync.pinned", h2d_chunk0, dtype="float32", shape=(n,),
                      nbytes=n * 4, flush=False,
                      check=lambda: assert_close(d_x[0], cupy.asarray(h_x[0]), dtype="exact"))
    t_probe = bench(lambda: launch_chunk_work(d_x[0], d_y[0], probe_iters, blocks=blocks), flush=False).ms
    iters = int(np.clip(round(probe_iters * e_copy["ms"] / t_probe), 16, 100_000))
    d_y[0].fill(np.nan)
    e_kern = rec.time("chunk_work", f"chunk_work.iters{iters}",
                      lambda: launch_chunk_work(d_x[0], d_y[0], iters, blocks=blocks), dtype="float32",
                      shape=(n,), flops=chunk_work_flops(n, iters), flush=False,
                      check=lambda: assert_close(d_y[0], chunk_work_ref(d_x[0], iters), dtype="float32"))
    return Pipeline(h_x, d_x, d_y, iters, int(blocks), e_copy, e_kern)


def pipeline_impl(streams: int) -> str:
    """The record's impl name of a schedule: ``serial.1stream``, ``overlap.3streams``."""
    return "serial.1stream" if int(streams) == 1 else f"overlap.{int(streams)}streams"


def time_pipelines(rec, pipe: Pipeline, stream_counts=(1, 3), runs: int = 6) -> tuple[dict, dict]:
    """Run the pipeline on each number of non-blocking streams ``runs`` times (the first is a warm-up),
    checking all chunks' results every time; record the median makespan (op ``h2d_pipeline``, impl
    :func:`pipeline_impl`). Returns (streams -> median ms, streams -> the last run's event times)."""
    import cupy

    from utils.check import assert_close
    chunks, n = pipe.h_x.shape
    ref_y = chunk_work_ref(cupy.asarray(pipe.h_x), pipe.iters)
    streams = {s: [cupy.cuda.Stream(non_blocking=True) for _ in range(int(s))] for s in stream_counts}
    measured, timeline = {}, {}
    for s, ss in streams.items():
        totals = []
        for _ in range(int(runs)):
            pipe.d_y.fill(np.nan)
            cupy.cuda.Device().synchronize()              # the fill runs on the legacy stream: finish it first
            total, marks = pipeline_times(*run_pipeline(pipe.h_x, pipe.d_x, pipe.d_y, pipe.iters, ss,
                                                        blocks=pipe.blocks))
            totals.append(total)
            assert_close(pipe.d_y, ref_y, dtype="float32", name=f"pipeline on {s} stream(s)")
        t = np.array(totals[1:])
        measured[s] = float(np.median(t))
        timeline[s] = marks
        rec.add("h2d_pipeline", pipeline_impl(s), dtype="float32", shape=(chunks, n), ms=measured[s],
                nbytes=chunks * n * 4, p10_ms=float(np.percentile(t, 10)), p90_ms=float(np.percentile(t, 90)),
                reps=len(t))
    return measured, timeline


# --- launch cost -----------------------------------------------------------------------------------------

def empty_kernel():
    return SOURCE.function("empty_kernel")


def launch_empty(fn) -> None:
    """One launch of the empty kernel (1 block of 1 thread) on the current stream."""
    fn((1,), (1,), ())


def enqueue_empty(fn, n: int) -> None:
    for _ in range(int(n)):
        fn((1,), (1,), ())


def queued_launches_ms(n: int, spin_ns: int) -> tuple[float, float]:
    """Device-side time per launch of ``n`` back-to-back empty kernels.

    A spin kernel holds the stream for ``spin_ns`` while the host enqueues the start event, the n
    launches and the end event behind it, so the GPU runs them back to back whatever the host's own
    speed. Returns (ms per launch on the GPU, ms the host took to enqueue them). If the enqueue took
    longer than the spin, the GPU waited on the host and the first number is the host's rate.
    """
    import cupy
    if int(n) < 1 or int(spin_ns) < 0:
        raise ValueError(f"need n >= 1 and spin_ns >= 0, got {n}, {spin_ns}")
    fn = empty_kernel()
    spin = SOURCE.function("spin_ns")
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    spin((1,), (32,), (np.uint64(spin_ns),))
    t0 = time.perf_counter()
    start.record()
    enqueue_empty(fn, n)
    end.record()
    enqueue_ms = (time.perf_counter() - t0) * 1e3
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / n, enqueue_ms


def capture_graph(fn, reps: int, stream):
    """A CUDA graph of ``reps`` back-to-back calls of ``fn`` (which launches on the current stream),
    captured on ``stream``, a non-blocking CuPy stream. The graph can be launched on any stream.

    Call ``fn`` once before capturing: a first call may compile and load a module, which is no
    stream work.
    """
    if int(reps) < 1:
        raise ValueError(f"need reps >= 1, got {reps}")
    with stream:
        stream.begin_capture()
        try:
            for _ in range(int(reps)):
                fn()
        finally:
            graph = stream.end_capture()
    return graph


def capture_empty_graph(n: int, stream):
    """A CUDA graph of ``n`` empty-kernel launches, captured on ``stream`` (a non-blocking CuPy stream)."""
    fn = empty_kernel()
    return capture_graph(lambda: launch_empty(fn), n, stream)


def graph_replay_ms(graph, n: int, stream, reps: int = 20) -> list[float]:
    """Device-side time per captured launch for ``reps`` replays of the graph (events on ``stream``)."""
    import cupy
    out = []
    for _ in range(int(reps)):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        graph.launch(stream)
        end.record(stream)
        end.synchronize()
        out.append(cupy.cuda.get_elapsed_time(start, end) / n)
    return out


def plot_pipeline(timeline: dict, measured: dict):
    """One lane pair per schedule (streams -> [(copy start, copy end, kernel end)] in ms): when each chunk's
    copy and kernel ran. A copy starts once its engine is free, a kernel once its copy and the SMs are."""
    from utils.plot import figure, version_style
    copy_c, kern_c = version_style(1)["color"], version_style(4)["color"]
    fig, axes = figure(len(timeline), 1, height=1.5, sharex=True)
    for ax, (streams, marks) in zip(axes[:, 0], timeline.items()):
        copy_end = kern_end = 0.0
        for i, (c0, c1, k1) in enumerate(marks):
            c_start, k_start = max(c0, copy_end), max(c1, kern_end)
            ax.broken_barh([(c_start, c1 - c_start)], (1.1, 0.8), color=copy_c, edgecolor="white", linewidth=0.8)
            ax.broken_barh([(k_start, k1 - k_start)], (0.1, 0.8), color=kern_c, edgecolor="white", linewidth=0.8)
            ax.text(c_start + (c1 - c_start) / 2, 1.5, str(i), ha="center", va="center", fontsize=7)
            ax.text(k_start + (k1 - k_start) / 2, 0.5, str(i), ha="center", va="center", fontsize=7, color="white")
            copy_end, kern_end = c1, k1
        ax.set_yticks([0.5, 1.5], ["kernel", "H2D copy"])
        ax.grid(axis="y", visible=False)
        ax.set_title(f"{streams} stream(s): {measured[streams]:.2f} ms (median)")
    axes[-1, 0].set_xlabel("ms since the start event")
    return fig


# --- what one launch costs, five ways ---------------------------------------------------------------------

LAUNCH_IMPLS = ("empty_kernel.sync", "empty_kernel.async", "empty_kernel.device", "cuda_graph.replay",
                "cuda_graph.wall")


def spread(values) -> tuple[float, float, float, int]:
    """(median, 10th percentile, 90th percentile, count) of repeated measurements."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("expected at least one measurement, got none")
    return float(np.median(v)), float(np.percentile(v, 10)), float(np.percentile(v, 90)), int(v.size)


@dataclasses.dataclass(frozen=True)
class LaunchCosts:
    us: dict            # impl (LAUNCH_IMPLS) -> microseconds per launch
    starved: bool       # the host's enqueue outlasted the spin: empty_kernel.device then includes host time
    graph_wall_ms: float
    n: int = 1000       # launches per burst and nodes per graph

    def table(self):
        from utils.table import Table
        return Table(["impl", "us per launch"], [[impl, f"{v:.2f}"] for impl, v in self.us.items()])

    def describe(self) -> str:
        """How the five compare: round trip / enqueue, enqueue / device, device / graph; the graph's wall clock."""
        us = self.us
        return (f"a synchronous launch round trip costs {us['empty_kernel.sync'] / us['empty_kernel.async']:.1f}x "
                f"the host's per-launch enqueue time; the host enqueues "
                f"{us['empty_kernel.async'] / us['empty_kernel.device']:.1f}x slower than the GPU runs empty kernels "
                f"back to back; a graph replay runs them {us['empty_kernel.device'] / us['cuda_graph.replay']:.1f}x "
                f"faster still\none graph launch of {self.n} kernels, wall clock including the host call and the "
                f"wait: {self.graph_wall_ms:.2f} ms ({us['cuda_graph.wall']:.2f} us per kernel)")


def measure_launch_costs(rec, n: int = 1000) -> LaunchCosts:
    """Time ``n`` empty-kernel launches five ways and record them (op ``launch``, metric us per launch):
    a synchronous round trip each (host wall clock), a burst enqueued without waiting (host), the same
    burst queued behind a spin so the GPU runs it back to back (device events), a CUDA graph of ``n``
    nodes replayed (device events), and that graph's launch-and-wait wall clock (host)."""
    import cupy

    from utils.bench import host_time
    fn = empty_kernel()
    stream = cupy.cuda.get_current_stream()
    launch_empty(fn)                    # load the module outside any timing
    stream.synchronize()

    def once():
        launch_empty(fn)
        stream.synchronize()

    def burst():
        enqueue_empty(fn, n)
        stream.synchronize()

    t_sync = host_time(once, reps=n)
    burst()
    t_async = host_time(burst, reps=10)
    spin = int(3 * t_async.ms * 1e6) + 2_000_000      # ns: three times what enqueueing the burst took
    queued = [queued_launches_ms(n, spin) for _ in range(6)][1:]
    cap = cupy.cuda.Stream(non_blocking=True)
    graph = capture_empty_graph(n, cap)
    graph.upload(cap)
    replays = graph_replay_ms(graph, n, cap, reps=21)[1:]
    t_wall = host_time(lambda: (graph.launch(cap), cap.synchronize()), reps=10)
    per = {
        "empty_kernel.sync": (t_sync.ms, t_sync.p10, t_sync.p90, t_sync.n),
        "empty_kernel.async": (t_async.ms / n, t_async.p10 / n, t_async.p90 / n, t_async.n),
        "empty_kernel.device": spread([q[0] for q in queued]),
        "cuda_graph.replay": spread(replays),
        "cuda_graph.wall": (t_wall.ms / n, t_wall.p10 / n, t_wall.p90 / n, t_wall.n),
    }
    for impl, (ms, p10, p90, reps) in per.items():
        rec.add("launch", impl, dtype="none", shape=(n,), ms=ms, metric_name="us", p10_ms=p10, p90_ms=p90,
                reps=reps)
    return LaunchCosts({impl: v[0] * 1e3 for impl, v in per.items()},
                       max(q[1] for q in queued) >= spin / 1e6, t_wall.ms, int(n))


def plot_costs(launch_entries, pipeline_entries, model_ms: dict):
    """Two stacked panels: microseconds per launch (log scale), and the stream experiment's makespans beside
    the model's (``model_ms``: name -> ms, drawn in grey)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from utils.plot import figure, peer_style, version_style
    fig, axes = figure(2, 1, height=2.4)
    ax = axes[0, 0]
    ax.barh([e["impl"] for e in launch_entries], [e["metric"] for e in launch_entries],
            color=version_style(0)["color"])
    for i, e in enumerate(launch_entries):
        ax.text(e["metric"], i, f" {e['metric']:.2f}", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(right=2 * max(e["metric"] for e in launch_entries))     # room for the value labels
    ax.set_xlabel("us per launch (log scale)")
    ax.set_title("What one launch costs")
    ax.invert_yaxis()
    ax = axes[1, 0]
    names = [e["impl"] for e in pipeline_entries] + list(model_ms)
    vals = [e["ms"] for e in pipeline_entries] + list(model_ms.values())
    ax.barh(names, vals, color=[version_style(0)["color"]] * len(pipeline_entries)
            + [peer_style(1)["color"]] * len(model_ms))
    ax.set_xlabel("ms for all chunks (copy + kernel)")
    ax.set_title("Copy/compute overlap: measured and model")
    ax.invert_yaxis()
    return fig
