"""Every softmax version on fresh random data with poisoned outputs: awkward shapes, fp32 and bf16,
fully masked rows (NaN, as torch), single survivors, large logits; the dispatcher on two TARGETS shapes."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

# rows of 1, 37, 199; widths that are not multiples of the 16-byte chunk (1, 7, 33, 4097) and 1000
# (a multiple of 8 but not of any block's span); one width per version's upper limit; 500, 3000 and
# 100000 reach the template instances the others miss (v2 with 4 fp32 / 2 bf16 chunks per lane, v3
# with 256 threads, v4 with 8 blocks of 16 elements per thread).
SHAPES = [(1, 1), (37, 7), (199, 33), (5, 500), (37, 1000), (1, 4097), (199, 1024), (3, 2048),
          (3, 3000), (2, 16384), (2, 16385), (2, 65536), (2, 100000), (1, 262144)]


def _dtypes():
    from kernels import softmax as S
    return [np.float32, S.BF16]


def _check(label, x, name):
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    y = poisoned(x.shape, x.dtype)
    S.VERSIONS[label].launch(x, y)
    assert_close(y, S.reference(x), dtype=np.dtype(x.dtype).name, name=name)
    return y


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_version_matches_the_reference(shape):
    from kernels import softmax as S
    for dt in _dtypes():
        x = S.random_input(shape, dt, scale=3.0)
        for label in S.VERSIONS:
            if S.supports(label, shape[1], dt):
                _check(label, x, f"{label} {np.dtype(dt).name} {shape}")


def test_masked_rows_and_large_logits():
    import cupy
    from kernels import softmax as S
    from utils.check import assert_close
    for dt in _dtypes():
        for cols in (7, 1000, 4097, 20000):
            x32 = cupy.random.standard_normal((4, cols), dtype=cupy.float32) * 1e4   # large logits
            x32[0] = -cupy.inf                                  # fully masked
            x32[1] = -cupy.inf
            x32[1, cols - 1] = 1.0                              # one survivor at the row's end
            x32[2, ::3] = -cupy.inf                             # partly masked
            x = x32 if dt == np.float32 else x32.astype(dt)
            ref = S.reference(x)
            for label in S.VERSIONS:
                if not S.supports(label, cols, dt):
                    continue
                y = cupy.full(x.shape, 12345.0, dtype=cupy.float32).astype(dt)   # poison that is not NaN
                S.VERSIONS[label].launch(x, y)
                name = f"{label} {np.dtype(dt).name} cols={cols}"
                y32 = y.astype(cupy.float32)
                assert bool(cupy.isnan(y32[0]).all()), f"{name}: a fully masked row must give NaN (as torch)"
                assert_close(y[1:], ref[1:], dtype=np.dtype(dt).name, name=name)


def test_dispatcher_on_targets_shapes_against_torch():
    import torch
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for shape in [(256, 1024), (64, 65536)]:
        for dt in _dtypes():
            x = S.random_input(shape, dt)
            y = S.softmax(x, out=poisoned(shape, dt))
            ref = S.reference(x)
            assert_close(S.softmax(x), ref, dtype=np.dtype(dt).name, name=f"softmax {shape}, out=None")
            assert_close(y, ref, dtype=np.dtype(dt).name, name=f"softmax {shape}")
            t = torch.softmax(S.as_torch(x), dim=-1)
            assert_close(S.from_torch(t), ref, dtype=np.dtype(dt).name, name=f"torch.softmax {shape}")


def test_bound_launches_match_the_reference():
    # the notebook times S.bind(...) closures: same kernels, arguments packed once
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for dt in _dtypes():
        for shape in [(37, 1000), (3, 20000)]:
            x = S.random_input(shape, dt, scale=3.0)
            ref = S.reference(x)
            for label in S.VERSIONS:
                if not S.supports(label, shape[1], dt):
                    continue
                y = poisoned(shape, dt)
                run = S.bind(label, x, y)
                run()
                run()
                assert_close(y, ref, dtype=np.dtype(dt).name, name=f"bind {label} {np.dtype(dt).name} {shape}")


def test_launchers_reject_bad_arguments():
    import cupy
    from kernels import softmax as S
    x = S.random_input((8, 64), np.float32)
    with pytest.raises(ValueError, match=r"expected shape \(8, 64\)"):
        S.VERSIONS["v2_warp_row"].launch(x, cupy.empty((64, 8), cupy.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        S.VERSIONS["v3_block_row"].launch(x, cupy.empty((8, 64), S.BF16))
    with pytest.raises(ValueError, match="C-contiguous"):
        S.VERSIONS["v1_online"].launch(x[:, ::2], cupy.empty((8, 32), cupy.float32))


def _raw_configs(dt, non_portable=False):
    """Every v5/v6/v7 instance, without (default) or only (non_portable=True) the clusters above 8."""
    from kernels import softmax as S
    return [(version, c) for version in S.RAW_TABLES for c in S.raw_configs(version, dt)
            if (version in (*S.CLUSTER_ROW_VERSIONS, "v9_stream") and c[2] > S.PORTABLE_CLUSTER)
            == non_portable]


@pytest.mark.parametrize("rows", [1, 37, 199])
def test_every_raw_instance_on_odd_rows_and_widths(rows):
    # every v5/v6/v7 template instance up to clusters of 8 (the tuning script's candidates too): its full
    # capacity, one element short of a 16-byte chunk (the scalar path), and a width that leaves later
    # blocks of a cluster empty
    import cupy
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for dt in _dtypes():
        dn = np.dtype(dt).name
        for version, cfg in _raw_configs(dt):
            cap = S.capacity(version, dt, cfg)
            for cols in {cap, cap - 1, max(1, cap // 3 + 5)}:
                r = rows if cap <= 65536 else min(rows, 3)      # keep the long rows' test small
                x = S.random_input((r, cols), dt, scale=3.0)
                y = poisoned((r, cols), dt)
                S.bind(version, x, y, cfg)()
                cupy.cuda.Device().synchronize()
                assert_close(y, S.reference(x), dtype=dn, name=f"{version}{cfg} {dn} {(r, cols)}")


def test_raw_instances_on_masked_rows_and_large_logits():
    import cupy
    from kernels import softmax as S
    from utils.check import assert_close
    for dt in _dtypes():
        dn = np.dtype(dt).name
        for version, cfg in _raw_configs(dt):
            cols = S.capacity(version, dt, cfg) - 3
            x32 = cupy.random.standard_normal((4, cols), dtype=cupy.float32) * 1e4
            x32[0] = -cupy.inf
            x32[1] = -cupy.inf
            x32[1, cols - 1] = 1.0
            x32[2, ::3] = -cupy.inf
            x = x32 if dt == np.float32 else x32.astype(dt)
            y = cupy.full(x.shape, 12345.0, dtype=cupy.float32).astype(dt)
            S.bind(version, x, y, cfg)()
            name = f"{version}{cfg} {dn} cols={cols}"
            assert bool(cupy.isnan(y[0].astype(cupy.float32)).all()), f"{name}: fully masked row must be NaN"
            assert_close(y[1:], S.reference(x)[1:], dtype=dn, name=name)


def test_dispatcher_on_every_targets_width():
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for cols in (1024, 4096, 16384, 65536, 262144):
        for dt in _dtypes():
            shape = (3, cols)
            x = S.random_input(shape, dt, scale=2.0)
            y = S.softmax(x, out=poisoned(shape, dt))
            assert_close(y, S.reference(x), dtype=np.dtype(dt).name, name=f"dispatch {S.plan(*shape, dt)} {shape}")


def test_non_portable_clusters_of_16():
    # v6 with 16 blocks per cluster: compiled with __cluster_dims__(16, 1, 1) and launched by CuPy's plain
    # cuLaunchKernel after the launcher sets CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED. Whether a
    # GPC can host 16 blocks is a property of the device (a MIG slice may not): a refusal by the driver
    # skips with its message; any wrong output fails.
    import cupy
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for dt in _dtypes():
        dn = np.dtype(dt).name
        for version, cfg in _raw_configs(dt, non_portable=True):
            cap = S.capacity(version, dt, cfg)
            for cols in (cap, cap - 1, cap // 3 + 5):
                x32 = cupy.random.standard_normal((3, cols), dtype=cupy.float32) * 3
                x32[1] = -cupy.inf                              # fully masked: NaN, as torch
                x = x32 if dt == np.float32 else x32.astype(dt)
                y = poisoned((3, cols), dt)
                try:
                    S.bind(version, x, y, cfg)()
                    cupy.cuda.Device().synchronize()
                except cupy.cuda.driver.CUDADriverError as exc:
                    pytest.skip(f"{version}{cfg}: the driver refuses a cluster of {cfg[2]}: {exc}")
                name = f"{version}{cfg} {dn} cols={cols}"
                assert bool(cupy.isnan(y[1].astype(cupy.float32)).all()), f"{name}: fully masked row must be NaN"
                assert_close(y[0::2], S.reference(x)[0::2], dtype=dn, name=name)


def test_v8_streams_several_rows_per_warp():
    # v8's grid gives each warp up to RPW rows (r, r + G, ...): a row count that leaves the last step
    # partial, widths on the vector and the scalar path, every instance; the prefetch of row r + G must
    # not leak into row r's output
    import cupy
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for dt in _dtypes():
        dn = np.dtype(dt).name
        for cfg in S.raw_configs("v8_warp_stream", dt):
            for rows, cols in ((8192 + 13, S.capacity("v8_warp_stream", dt, cfg)), (999, 1000), (50, 7)):
                x = S.random_input((rows, cols), dt, scale=3.0)
                y = poisoned((rows, cols), dt)
                S.bind("v8_warp_stream", x, y, cfg)()
                cupy.cuda.Device().synchronize()
                assert_close(y, S.reference(x), dtype=dn, name=f"v8{cfg} {dn} {(rows, cols)}")


def test_v9_streams_many_rows_per_cluster():
    # more rows than the persistent grid's clusters (cluster c walks rows c, c + G, ...; buffers and parity
    # slots alternate), row counts that leave the last step partial, every instance on a row one element
    # short of a chunk and on its full width, an odd long row; -inf rows and large logits in the mix
    import cupy
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for dt in _dtypes():
        dn = np.dtype(dt).name
        for cfg in S.raw_configs("v9_stream", dt):
            cap = S.capacity("v9_stream", dt, cfg)
            (ln,) = S.geometry("v9_stream", 1 << 20, cap, dt, cfg)
            clusters = ln.grid[0] // cfg[2]
            for cols in (cap, cap - 1):
                rows = min(3 * clusters + 1, max(5, (1 << 24) // cols))
                x32 = cupy.random.standard_normal((rows, cols), dtype=cupy.float32) * 3
                x32[1] = -cupy.inf                              # fully masked: NaN, as torch
                x32[2] *= 1e4                                   # large logits
                x32[3, ::3] = -cupy.inf
                x = x32 if dt == np.float32 else x32.astype(dt)
                y = poisoned((rows, cols), dt)
                try:
                    S.bind("v9_stream", x, y, cfg)()
                    cupy.cuda.Device().synchronize()
                except cupy.cuda.driver.CUDADriverError as exc:
                    if cfg[2] > S.PORTABLE_CLUSTER:
                        pytest.skip(f"v9{cfg}: the driver refuses a cluster of {cfg[2]}: {exc}")
                    raise
                name = f"v9{cfg} {dn} {(rows, cols)}"
                assert bool(cupy.isnan(y[1].astype(cupy.float32)).all()), f"{name}: fully masked row must be NaN"
                keep = cupy.asarray([r for r in range(rows) if r != 1])
                assert_close(y[keep], S.reference(x)[keep], dtype=dn, name=name)
    for dt in _dtypes():                                        # the default instance on an odd long row
        x = S.random_input((37, 262144 - 3), dt, scale=3.0)
        y = poisoned(x.shape, dt)
        S.VERSIONS["v9_stream"].launch(x, y)
        assert_close(y, S.reference(x), dtype=np.dtype(dt).name, name=f"v9 default {np.dtype(dt).name} 262141")


# --- v11_early_arrive: v10 with the split exit barrier (select with -k early_arrive) ------------------

def _same_bits(a, b):
    import cupy
    words = cupy.uint32 if np.dtype(a.dtype).itemsize == 4 else cupy.uint16
    return bool(cupy.array_equal(a.view(words), b.view(words)))


def _early_arrive_case(cfg, dt, rows, cols):
    """v11 and v10 on one instance, fresh data (with a fully masked row, a single survivor, a partly
    masked row and large logits), poisoned outputs: v11 must match the reference and give
    v10's bits (the same arithmetic; only the barrier differs). Rows 0-3 are special only when there are
    at least 5 rows. A refused cluster of 16 skips."""
    import cupy
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    dn = np.dtype(dt).name
    x32 = cupy.random.standard_normal((rows, cols), dtype=cupy.float32) * 3
    masked = rows >= 5                                  # rows 0-3 special when there are others too
    if masked:
        x32[0] = -cupy.inf                              # fully masked: NaN, as torch
        x32[1] = -cupy.inf
        x32[1, cols - 1] = 1.0                          # one survivor at the row's end
        x32[2, ::3] = -cupy.inf                         # partly masked
        x32[3] *= 1e4                                   # large logits
    x = x32 if dt == np.float32 else x32.astype(dt)
    ys = {}
    for version in ("v10_cluster_once", "v11_early_arrive"):
        ys[version] = poisoned((rows, cols), dt)
        try:
            S.bind(version, x, ys[version], cfg)()
            cupy.cuda.Device().synchronize()
        except cupy.cuda.driver.CUDADriverError as exc:
            if cfg[2] > S.PORTABLE_CLUSTER:
                pytest.skip(f"{version}{cfg}: the driver refuses a cluster of {cfg[2]}: {exc}")
            raise
    y = ys["v11_early_arrive"]
    name = f"v11{cfg} {dn} {(rows, cols)}"
    if masked:
        assert bool(cupy.isnan(y[0].astype(cupy.float32)).all()), f"{name}: a fully masked row must give NaN"
    k = 1 if masked else 0
    assert_close(y[k:], S.reference(x)[k:], dtype=dn, name=name)
    assert _same_bits(y, ys["v10_cluster_once"]), f"{name}: not bit-identical to v10 on the same instance"


def _early_arrive_configs():
    """(dtype, config) of every v11 instance, one test case each (a refused cluster of 16 skips only itself)."""
    from kernels import softmax as S
    return [pytest.param(dt, cfg, id=f"{np.dtype(dt).name}-{'x'.join(map(str, cfg))}")
            for dt in _dtypes() for cfg in S.raw_configs("v11_early_arrive", dt)]


@pytest.mark.parametrize("dt,cfg", _early_arrive_configs())
@pytest.mark.parametrize("rows", [1, 37, 199])
def test_early_arrive_on_every_instance(rows, dt, cfg):
    # every v11 instance (clusters of 16 included) at its full width, one element short of a chunk (the
    # scalar path) and a width that leaves the later blocks of a cluster empty
    from kernels import softmax as S
    cap = S.capacity("v11_early_arrive", dt, cfg)
    for cols in (cap, cap - 1, cap // 3 + 5):
        _early_arrive_case(cfg, dt, rows if cap <= 65536 else min(rows, 5), cols)


@pytest.mark.parametrize("dt,cfg", _early_arrive_configs())
def test_early_arrive_over_many_waves(dt, cfg):
    # far more clusters than fit at once (128 MiB of input), so that clusters start on SMs that earlier
    # clusters (which arrive before their stores and leave after a bare wait) have just left: no block
    # may read a peer's shared memory after that peer has exited
    from kernels import softmax as S
    cap = S.capacity("v11_early_arrive", dt, cfg)
    _early_arrive_case(cfg, dt, max(64, (1 << 27) // (cap * np.dtype(dt).itemsize)), cap)


def test_early_arrive_default_launch():
    # the registered launcher (default instance per width) on the chapter's long rows
    from kernels import softmax as S
    from utils.check import assert_close, poisoned
    for dt in _dtypes():
        for shape in ((3, 20000), (64, 65536), (8, 262144), (5, 262141)):
            x = S.random_input(shape, dt, scale=3.0)
            y = poisoned(shape, dt)
            S.VERSIONS["v11_early_arrive"].launch(x, y)
            assert_close(y, S.reference(x), dtype=np.dtype(dt).name, name=f"v11 default {np.dtype(dt).name} {shape}")
