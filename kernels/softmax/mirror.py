"""The softmax kernels' algorithm mirrored in NumPy (chapter 6), so the CPU tests can check it: which
elements each thread of a register version holds, the (m, l) state and its merge, and a whole version
simulated in float64 (per-thread states merged in a tree, then y = e^{x - m_t} e^{m_t - m} / l)."""
from __future__ import annotations

import numpy as np


def thread_elements(label: str, cols: int, dtype, config=None) -> np.ndarray:
    """[threads per row, elements per thread] column indices each thread of a register version holds
    (-1: none), for ``config`` or the version's default instance.

    Mirrors the kernels: thread t of a block holds chunks first + j * stride (j < chunks), chunk c
    holding elements c * VEC .. c * VEC + VEC - 1; block rank r of a cluster starts at r x its slice.
    """
    from . import V4_THREADS, VERSIONS, WARP_VERSIONS, config_of, shape_problem, vec
    v = VERSIONS[label]
    if not v.configs:
        raise KeyError(f"{label} does not hold the row in registers")
    cfg = config_of(label, v.resolve_config(shape_problem(1, cols, dtype), config))
    nc = cfg.chunks
    if label in WARP_VERSIONS:
        tpb, cl = 32, 1
    else:
        tpb = V4_THREADS if label == "v4_cluster_row" else cfg.threads
        cl = getattr(cfg, "cluster", 1)
    threads = cl * tpb
    rank, t = np.divmod(np.arange(threads), tpb)
    firsts = rank * nc * tpb + t
    chunks = firsts[:, None] + tpb * np.arange(nc)[None, :]                # [threads, chunks]
    w = vec(dtype)
    elems = (chunks[:, :, None] * w + np.arange(w)[None, None, :]).reshape(threads, nc * w)
    return np.where(elems < cols, elems, -1)


def state(x):
    """(m, l) of the last dim of x in float64: m = max x, l = sum e^{x - m} (-inf rows: (-inf, 0))."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    return m, np.exp(x - m_safe[..., None]).sum(axis=-1)


def merge(a, b):
    """The merge operator on (m, l) pairs (NumPy arrays of states): the state of the union."""
    (ma, la), (mb, lb) = a, b
    m = np.maximum(ma, mb)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    return m, la * np.exp(ma - m_safe) + lb * np.exp(mb - m_safe)


def merge_tree(ms, ls):
    """Merge [rows, threads] states pairwise (a butterfly-like tree) into one state per row."""
    rows = ms.shape[0]
    while ms.shape[1] > 1:
        if ms.shape[1] % 2:
            ms = np.concatenate([ms, np.full((rows, 1), -np.inf)], axis=1)
            ls = np.concatenate([ls, np.zeros((rows, 1))], axis=1)
        ms, ls = merge((ms[:, 0::2], ls[:, 0::2]), (ms[:, 1::2], ls[:, 1::2]))
    return ms[:, 0], ls[:, 0]


def simulate(label: str, x: np.ndarray, config=None) -> np.ndarray:
    """A register version's algorithm on the CPU, in float64: per-thread states from the elements the
    thread holds, merged in a tree, then y = e^{x - m_t} e^{m_t - m} / l (NaN for a fully masked row)."""
    rows, cols = x.shape
    idx = thread_elements(label, cols, x.dtype, config)                  # [threads, E]
    vals = np.where(idx[None] >= 0, x.astype(np.float64)[:, np.maximum(idx, 0)], -np.inf)  # [rows, threads, E]
    m_t, l_t = state(vals)                                                # [rows, threads]
    m, l = merge_tree(m_t, l_t)
    with np.errstate(invalid="ignore", divide="ignore"):
        inv_l = np.where(l > 0, 1.0 / np.where(l > 0, l, 1.0), np.nan)
        m_t_safe = np.where(np.isneginf(m_t), 0.0, m_t)
        factor = np.where(np.isneginf(m)[:, None], 0.0, np.exp(m_t - np.where(np.isneginf(m), 0.0, m)[:, None]))
        p = np.exp(vals - m_t_safe[..., None]) * (factor * inv_l[:, None])[..., None]
    y = np.full((rows, cols), np.inf)
    for t in range(idx.shape[0]):
        ok = idx[t] >= 0
        y[:, idx[t][ok]] = p[:, t, ok]
    return y
