"""Every softmax version on fresh seeded random data with poisoned outputs: awkward shapes, fp32 and bf16,
fully masked rows (NaN, as torch), single survivors, large logits; every template instance; the
dispatcher against torch. Parametrized per version, so a failure names it; every draw names its seed."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
ml_dtypes = pytest.importorskip("ml_dtypes")      # bf16 on the host side: skip, never fail collection

from kernels import softmax as S  # noqa: E402

SEED = 606
LABELS = list(S.VERSIONS)
DTYPES = [np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)]
DTYPE_IDS = [d.name for d in DTYPES]
# rows of 1, 37, 199; widths that are not multiples of the 16-byte chunk (1, 7, 33, 4097) and 1000
# (a multiple of 8 but not of any block's span); one width per version's upper limit; 500, 3000 and
# 100000 reach the template instances the others miss.
SHAPES = [(1, 1), (37, 7), (199, 33), (5, 500), (37, 1000), (1, 4097), (199, 1024), (3, 2048),
          (3, 3000), (2, 16384), (2, 16385), (2, 65536), (2, 100000), (1, 262144)]


def seed_for(*parts) -> int:
    return (SEED * 1_000_003 + sum(map(ord, repr(parts)))) % 2**31


def runnable(label):
    """Skip a version whose requirement (clusters) the GPU, or the emulated arch, lacks."""
    from utils.gpu import missing_features
    missing = missing_features(S.VERSIONS[label].requires)
    if missing:
        pytest.skip(f"{label} needs {', '.join(missing)}")
    return S.VERSIONS[label]


def special_input(rows, cols, dtype, seed, scale=3.0):
    """Seeded normal data; with at least 5 rows, row 0 fully masked, row 1 a single survivor at its end,
    row 2 partly masked, row 3 large logits. Returns (x, special) where special says rows 0-3 are set."""
    import cupy
    x32, _ = S.random_input((rows, cols), np.float32, scale=scale, seed=seed)
    special = rows >= 5
    if special:
        x32[0] = -cupy.inf
        x32[1] = -cupy.inf
        x32[1, cols - 1] = 1.0
        x32[2, ::3] = -cupy.inf
        x32[3] *= 1e4
    return (x32 if dtype == np.float32 else x32.astype(dtype)), special


def check(label, x, special, name, config=None, run_twice=False):
    """Run a version on x (output poisoned), compare with the reference; a masked row must give NaN."""
    import cupy
    from utils.check import assert_close, poisoned
    y = poisoned(x.shape, x.dtype)
    v = S.VERSIONS[label]
    if run_twice:                        # a bound run, launched twice: the form timing loops use
        run = v.bind(x, y, config=config)
        run()
        run()
    else:
        v(x, y, config=config)
    cupy.cuda.Device().synchronize()
    ref = S.reference(x)
    if special:
        assert bool(cupy.isnan(y[0].astype(cupy.float32)).all()), f"{name}: a fully masked row must give NaN"
        y, ref = y[1:], ref[1:]
    assert_close(y, ref, dtype=np.dtype(x.dtype).name, name=name)
    return y


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_version_matches_the_reference(shape, dtype, label):
    v = runnable(label)
    if not v.supports(S.shape_problem(*shape, dtype)):
        pytest.skip(f"{label} does not take {shape}")
    seed = seed_for(label, shape, dtype.name)
    x, _ = S.random_input(shape, dtype, scale=3.0, seed=seed)
    check(label, x, False, f"{label} {dtype.name} {shape} (seed {seed})", run_twice=shape[0] == 37)


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_masked_rows_and_large_logits(dtype, label):
    v = runnable(label)
    for cols in (7, 1000, 4097, 20000):
        if not v.supports(S.shape_problem(5, cols, dtype)):
            continue
        seed = seed_for(label, cols, dtype.name)
        x, special = special_input(5, cols, dtype, seed)
        check(label, x, special, f"{label} {dtype.name} cols={cols} (seed {seed})")


def instances(portable: bool):
    """(label, dtype, config) of every tuned instance, clusters up to 8 (portable) or above 8."""
    from utils.build import PORTABLE_CLUSTER
    out = []
    for label in S.DEFAULTS:
        for dt in DTYPES:
            for cfg in S.all_configs(label, dt):
                if (getattr(cfg, "cluster", 1) <= PORTABLE_CLUSTER) == portable:
                    out.append(pytest.param(label, dt, cfg, id=f"{label}-{dt.name}-{'x'.join(map(str, cfg))}"))
    return out


def run_instance(label, dt, cfg, rows, cols, special_rows=True):
    seed = seed_for(label, cfg, rows, cols, dt.name)
    x, special = special_input(rows, cols, dt, seed) if special_rows else (
        S.random_input((rows, cols), dt, scale=3.0, seed=seed)[0], False)
    return check(label, x, special, f"{label}{tuple(cfg)} {dt.name} {(rows, cols)} (seed {seed})", config=cfg)


@pytest.mark.parametrize("label,dt,cfg", instances(portable=True))
@pytest.mark.parametrize("rows", [1, 37, 199])
def test_every_instance_on_odd_rows_and_widths(rows, label, dt, cfg):
    # its full capacity, one element short of a 16-byte chunk (the scalar path), and a width that leaves
    # later blocks of a cluster empty; masked rows and large logits where there are 5 rows or more
    runnable(label)
    cap = S.capacity(label, cfg, dt)
    for cols in sorted({cap, cap - 1, max(1, cap // 3 + 5)}):
        run_instance(label, dt, cfg, rows if cap <= 65536 else min(rows, 5), max(cols, 1))


@pytest.mark.parametrize("label,dt,cfg", instances(portable=False))
def test_non_portable_clusters_of_16(label, dt, cfg):
    # clusters of 16 blocks: compiled with __cluster_dims__(16, 1, 1), launched after the attribute that
    # allows non-portable sizes is set. Whether a GPC hosts 16 blocks is a property of the device (a MIG
    # slice may not): a refusal by the driver skips with its message; any wrong output fails.
    import cupy
    runnable(label)
    cap = S.capacity(label, cfg, dt)
    for cols in (cap, cap - 1, cap // 3 + 5):
        try:
            run_instance(label, dt, cfg, 5, cols)
        except cupy.cuda.driver.CUDADriverError as exc:
            pytest.skip(f"{label}{tuple(cfg)}: the driver refuses a cluster of {cfg.cluster}: {exc}")


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
def test_v8_streams_several_rows_per_warp(dt):
    # each warp walks up to rows_per_warp rows (r, r + G, ...): a row count that leaves the last step
    # partial, widths on the vector and the scalar path; the prefetch of row r + G must not leak into row r
    for cfg in S.all_configs("v8_warp_stream", dt):
        for rows, cols in ((8192 + 13, S.capacity("v8_warp_stream", cfg, dt)), (999, 1000), (50, 7)):
            run_instance("v8_warp_stream", dt, cfg, rows, cols)


@pytest.mark.parametrize("label,dt,cfg", [p for p in instances(True) + instances(False) if p.values[0] == "v9_stream"])
def test_v9_streams_many_rows_per_cluster(label, dt, cfg):
    # more rows than the persistent grid holds clusters (cluster c walks rows c, c + G, ...; buffers and
    # parity slots alternate), masked rows and large logits in the mix
    import cupy
    runnable(label)
    cap = S.capacity(label, cfg, dt)
    for cols in (cap, cap - 1):
        rows = max(5, min(1200, (1 << 24) // cols))
        try:
            run_instance(label, dt, cfg, rows, cols)
        except cupy.cuda.driver.CUDADriverError as exc:
            if cfg.cluster > 8:
                pytest.skip(f"v9{tuple(cfg)}: the driver refuses a cluster of {cfg.cluster}: {exc}")
            raise


def same_bits(a, b) -> bool:
    import cupy
    words = cupy.uint32 if np.dtype(a.dtype).itemsize == 4 else cupy.uint16
    return bool(cupy.array_equal(a.view(words), b.view(words)))


@pytest.mark.parametrize("label,dt,cfg", [p for p in instances(True) + instances(False)
                                          if p.values[0] == "v11_early_arrive"])
def test_early_arrive_gives_v10s_bits_over_many_waves(label, dt, cfg):
    # far more clusters than fit at once (64 MiB of input), so that clusters start on SMs that earlier
    # clusters (which arrive before their stores and leave after a bare wait) have just left: no block may
    # read a peer's shared memory after that peer has exited. v11 must give v10's bits.
    import cupy
    runnable(label)
    cap = S.capacity(label, cfg, dt)
    rows = max(64, (1 << 26) // (cap * dt.itemsize))
    seed = seed_for(label, cfg, dt.name)
    x, _ = special_input(rows, cap, dt, seed)
    try:
        y11 = check("v11_early_arrive", x, True, f"v11{tuple(cfg)} {dt.name} (seed {seed})", config=cfg)
        y10 = check("v10_cluster_once", x, True, f"v10{tuple(cfg)} {dt.name} (seed {seed})", config=cfg)
    except cupy.cuda.driver.CUDADriverError as exc:
        if cfg.cluster > 8:
            pytest.skip(f"{tuple(cfg)}: the driver refuses a cluster of {cfg.cluster}: {exc}")
        raise
    assert same_bits(y11, y10), f"v11{tuple(cfg)} {dt.name} (seed {seed}): not bit-identical to v10"


@pytest.mark.parametrize("dt", DTYPES, ids=DTYPE_IDS)
def test_dispatcher_on_every_targets_width_against_torch(dt):
    import torch
    from utils.arrays import as_torch, from_torch
    from utils.check import assert_close, poisoned
    for cols in (1024, 4096, 16384, 65536, 262144):
        shape = (3, cols)
        seed = seed_for("dispatch", cols, dt.name)
        x, _ = S.random_input(shape, dt, scale=2.0, seed=seed)
        ref = S.reference(x)
        name = f"dispatch {S.dispatch(*shape, dt)} {dt.name} {shape} (seed {seed})"
        assert_close(S.softmax(x, out=poisoned(shape, dt)), ref, dtype=dt.name, name=name)
        assert_close(S.softmax(x), ref, dtype=dt.name, name=name + ", out=None")
        t = torch.softmax(as_torch(x), dim=-1)
        assert_close(from_torch(t), ref, dtype=dt.name, name=f"torch.softmax {shape} (seed {seed})")


def test_versions_reject_bad_arguments_on_the_gpu():
    import cupy
    x, _ = S.random_input((8, 64), np.float32, seed=seed_for("bad"))
    with pytest.raises(ValueError, match=r"expected shape \(8, 64\)"):
        S.VERSIONS["v2_warp_row"](x, cupy.empty((64, 8), cupy.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        S.VERSIONS["v3_block_row"](x, cupy.empty((8, 64), S.BF16))
    with pytest.raises(ValueError, match="C-contiguous"):
        S.VERSIONS["v1_online"](x[:, ::2], cupy.empty((8, 32), cupy.float32))
