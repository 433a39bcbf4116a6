"""Chapter 4 host side on a CPU: cost models, launch geometry, launcher validation, and the index maps
of the kernels (bank conflicts, swizzles, micro-tile placement) checked by simulating them in NumPy."""
import numpy as np
import pytest

from kernels import memory as M
from kernels import transpose as T
from tests.test_build_show_ops import FakeDeviceArray


# --- transpose -------------------------------------------------------------------------------------

def test_cost_model_counts_read_plus_write():
    assert T.nbytes(8192, 8192) == 2 * 4 * 8192 * 8192
    assert T.nbytes(3, 5, itemsize=2) == 60


def test_reference_is_a_contiguous_transpose(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    r = T.reference(x)
    assert r.flags.c_contiguous and r.shape == (3, 5) and np.array_equal(r, x.T)


@pytest.mark.parametrize("rows,cols", [(1823, 781), (1, 37), (199, 1), (8192, 8192)])
def test_geometry_covers_every_element(rows, cols):
    for v in T.VERSIONS.values():
        (gx, gy, gz), (bx, by, bz) = T.geometry(v.kernel, rows, cols)
        assert (bx, by, bz) == (32, 8, 1) and gz == 1
        if v.kernel == "transpose_v0_naive":
            assert gx * 32 >= cols and gy * 8 >= rows
        elif v.kernel == "transpose_v1_naive_colread":
            assert gx * 32 >= rows and gy * 8 >= cols
        elif v.kernel in ("transpose_v5_vec4", "transpose_v6_vec4_stream"):
            assert gx * 128 >= cols and gy * 32 >= rows
        elif v.kernel == "transpose_v7_vec4_colmajor":
            assert gx * 32 >= rows and gy * 128 >= cols
        elif v.kernel == "transpose_v8_vec4_tile64":
            assert gx * 64 >= rows and gy * 128 >= cols
        else:
            assert gx * 32 >= cols and gy * 32 >= rows


def test_versions_are_numbered_in_order_and_named_after_their_kernels():
    labels = list(T.VERSIONS)
    assert [int(lbl.split("_")[0][1:]) for lbl in labels] == list(range(len(labels)))
    for lbl, v in T.VERSIONS.items():
        assert v.kernel == "transpose_" + lbl
    assert T.BEST in T.VERSIONS


def test_every_version_has_a_snippet():
    from utils.show import snippets
    names = snippets(T.SOURCE.path.read_text())
    for lbl in T.VERSIONS:
        n = int(lbl.split("_")[0][1:])
        assert f"transpose_v{n}" in names or (2 <= n <= 4 and "transpose_tile32" in names)


@pytest.mark.parametrize("x,out,msg", [
    (np.zeros((4, 4), np.float32), FakeDeviceArray((4, 4), np.float32), "expected a CUDA device array"),
    (FakeDeviceArray((4, 4), np.float64), FakeDeviceArray((4, 4), np.float32), "expected dtype float32"),
    (FakeDeviceArray((16,), np.float32), FakeDeviceArray((16,), np.float32), "expected 2 dimensions"),
    (FakeDeviceArray((0, 4), np.float32), FakeDeviceArray((4, 0), np.float32), "at least one row"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((4, 6), np.float32), r"expected shape \(6, 4\)"),
    (FakeDeviceArray((4, 6), np.float32, strides=(4, 16)), FakeDeviceArray((6, 4), np.float32), "C-contiguous"),
    (FakeDeviceArray((4, 6), np.float32), FakeDeviceArray((6, 4), np.float32, ptr=0x10004), "aligned"),
])
def test_launchers_reject_bad_arguments(x, out, msg):
    for v in T.VERSIONS.values():
        with pytest.raises(ValueError, match=msg):
            v.launch(x, out)


def test_grid_y_limit_is_checked():
    x = FakeDeviceArray((8 * 65536, 1), np.float32)
    out = FakeDeviceArray((1, 8 * 65536), np.float32)
    with pytest.raises(ValueError, match="grid y"):
        T.VERSIONS["v0_naive"].launch(x, out)


def _banks_of_16B_phase(chunk_indices):
    """Each 16-byte access covers 4 banks; 8 lanes per phase are conflict-free iff their chunks
    fall in 8 distinct positions modulo 8 (8 chunks = 32 banks)."""
    return len({c % 8 for c in chunk_indices}) == len(chunk_indices)


def simulate_vec4(x, tr=32):
    """The v5-v8 kernels' index arithmetic in NumPy, tile by tile (fast path and edge path alike)."""
    rows, cols = x.shape
    h_count, ch = tr // 32, tr // 4
    out = np.full((cols, rows), np.nan, np.float32)
    for r0 in range(0, rows, tr):
        for c0 in range(0, cols, 128):
            tile = np.full((128 * ch, 4), np.nan, np.float32)  # [128, CH] float4 chunks
            for w in range(8):
                for lane in range(32):
                    for h in range(h_count):
                        a = np.zeros((4, 4), np.float32)
                        for i in range(4):
                            for j in range(4):
                                r, c = r0 + 32 * h + 4 * w + i, c0 + 4 * lane + j
                                if r < rows and c < cols:
                                    a[i, j] = x[r, c]
                        for j in range(4):
                            c = 4 * lane + j
                            tile[c * ch + 8 * h + (w ^ ((c >> 2) & 7))] = a[:, j]
            for t in range(256):
                for i in range(128 * ch // 256):
                    idx = t + 256 * i
                    c, k = idx // ch, idx % ch
                    v = tile[c * ch + (k ^ ((c >> 2) & 7))]
                    if c0 + c < cols:
                        for j in range(4):
                            if r0 + 4 * k + j < rows:
                                out[c0 + c, r0 + 4 * k + j] = v[j]
    return out


@pytest.mark.parametrize("tr", [32, 64])
@pytest.mark.parametrize("shape", [(37, 131), (64, 256), (5, 3), (100, 20)])
def test_vec4_index_maps_transpose(shape, tr, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    assert np.array_equal(simulate_vec4(x, tr), x.T)


@pytest.mark.parametrize("tr", [32, 64])
def test_vec4_shared_memory_accesses_are_conflict_free(tr):
    h_count, ch = tr // 32, tr // 4
    # load side: warp w, lanes 8q..8q+7 store row c = 4 l + j at physical chunk 8h + (w ^ ((c >> 2) & 7))
    for w in range(8):
        for h in range(h_count):
            for j in range(4):
                for q in range(4):
                    chunks = [(4 * lane + j) * ch + 8 * h + (w ^ (((4 * lane + j) >> 2) & 7))
                              for lane in range(8 * q, 8 * q + 8)]
                    assert _banks_of_16B_phase(chunks)
    # store side: thread t reads row idx // CH, physical chunk (idx % CH) ^ ((c >> 2) & 7), idx = t + 256 i
    for i in range(128 * ch // 256):
        for t0 in range(0, 256, 8):
            chunks = []
            for t in range(t0, t0 + 8):
                idx = t + 256 * i
                c, k = idx // ch, idx % ch
                chunks.append(c * ch + (k ^ ((c >> 2) & 7)))
            assert _banks_of_16B_phase(chunks)
    # every (row, logical chunk) has its own physical slot
    slots = {c * ch + (k ^ ((c >> 2) & 7)) for c in range(128) for k in range(ch)}
    assert len(slots) == 128 * ch


@pytest.mark.parametrize("ld,swizzle,ways", [(32, False, 32), (33, False, 1), (32, True, 1)])
def test_tile32_column_read_conflicts(ld, swizzle, ways):
    # phase 2 of v2/v3/v4: lane tx reads word tx * LD + col(tx, ty + j)
    for col in range(32):
        words = [tx * ld + ((col ^ tx) if swizzle else col) for tx in range(32)]
        assert M.conflict_ways([wd % 32 for wd in words]) == ways
    # phase 1 (row writes) is conflict-free in all three layouts
    for row in range(32):
        words = [row * ld + ((tx ^ row) if swizzle else tx) for tx in range(32)]
        assert M.conflict_ways([wd % 32 for wd in words]) == 1


# --- memory microbenchmarks ------------------------------------------------------------------------

def test_chase_is_one_cycle_through_every_line():
    ch = M.make_chase(64 * M.LINE_BYTES, xp=np)
    seen, j = [], ch.start
    for _ in range(ch.n_nodes):
        assert j % M.NODE_STRIDE == 0
        seen.append(j)
        j = int(ch.next[j])
    assert j == ch.start and len(set(seen)) == ch.n_nodes
    assert ch.end_after(5) == seen[5] and ch.end_after(ch.n_nodes + 2) == seen[2]


def test_chase_rejects_bad_sizes():
    with pytest.raises(ValueError, match="multiple of 128"):
        M.make_chase(1000, xp=np)


def test_chase_plan():
    l2 = 60 << 20
    hops, flush = M.chase_plan(16 << 10, l2)
    assert not flush and hops % (16 << 10 >> 7) == 0 and hops >= 1 << 17
    hops, flush = M.chase_plan(24 << 20, l2)
    assert not flush and hops == (24 << 20) // 128
    hops, flush = M.chase_plan(48 << 20, l2)
    assert not flush and hops == (48 << 20) // 128
    hops, flush = M.chase_plan(1 << 30, l2)
    assert flush and hops < (1 << 30) // 128


def test_strided_model():
    assert M.strided_model(1) == 1.0
    assert M.strided_model(2) == pytest.approx(2 / 3)
    assert M.strided_model(8) == M.strided_model(64) == pytest.approx(2 / 9)
    assert M.strided_model(16, sector_bytes=64) == pytest.approx(2 / 17)


@pytest.mark.parametrize("mode,ways", [("row", 1), ("col", 32), ("col_padded", 1), ("col_swizzled", 1)])
def test_smem_bank_model(mode, ways):
    assert all(M.conflict_ways(M.smem_banks(mode, col=c)) == ways for c in range(32))


def test_smem_reference_on_cpu(rng):
    x = rng.integers(-8, 9, size=2 * 1024).astype(np.float32)
    ref = M.smem_reference(x, "col", 3, xp=np)
    assert ref.shape == (2 * M.BLOCK,)
    assert ref[0] == 3 * x[:32].sum() and ref[32] == ref[0]          # warp 1, lane 0: row 0 again
    assert ref[M.BLOCK + 1] == 3 * x[1024 + 32:1024 + 64].sum()      # block 1, lane 1: row 1
    row = M.smem_reference(x, "row", 1, xp=np)
    assert row[1] == x[:1024].reshape(32, 32)[:, 1].sum()


@pytest.mark.parametrize("fn,args,msg", [
    (M.strided_copy, (FakeDeviceArray((10,), np.float32), FakeDeviceArray((4,), np.float32), 4), "needs 13"),
    (M.strided_copy, (FakeDeviceArray((10,), np.float32), FakeDeviceArray((4,), np.float32), 0), "stride"),
    (M.copy_vec, (FakeDeviceArray((6,), np.float32), FakeDeviceArray((6,), np.float32), 4), "multiple of the vector"),
    (M.copy_vec, (FakeDeviceArray((8,), np.float32), FakeDeviceArray((8,), np.float32), 3), "width"),
    (M.copy_vec, (FakeDeviceArray((8,), np.float32), FakeDeviceArray((4,), np.float32), 1), r"shape \(8\)"),
    (M.smem_read, (FakeDeviceArray((1000,), np.float32), FakeDeviceArray((256,), np.float32), "col", 1), "multiple of 1024"),
    (M.smem_read, (FakeDeviceArray((2048,), np.float32), FakeDeviceArray((256,), np.float32), "col", 1), "512 floats"),
    (M.smem_read, (FakeDeviceArray((1024,), np.float32), FakeDeviceArray((256,), np.float32), "diag", 1), "mode"),
])
def test_memory_launchers_reject_bad_arguments(fn, args, msg):
    with pytest.raises(ValueError, match=msg):
        fn(*args)
