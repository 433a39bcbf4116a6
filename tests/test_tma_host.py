"""utils.tma and kernels.tma_copy on a CPU: every validation rule, the innermost-first conversion the
driver receives (through a stand-in for cuTensorMapEncodeTiled), the descriptor's form, and the
swizzle model of where TMA puts each byte of a box in shared memory."""
import numpy as np
import pytest

from kernels import tma_copy as K
from utils import tma


class DeviceArrayStandIn:
    """Shape, dtype and a device pointer: all tma.tensor_map reads from an array."""

    def __init__(self, shape, dtype, ptr=0x7f0000000000, strides=None):
        self.shape, self.dtype = tuple(shape), tma.resolve_dtype(dtype)
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": self.dtype.str,
                                         "data": (ptr, False), "strides": strides, "version": 3}


GOOD = dict(address=0x10000, shape=(1000, 1000), strides=(4000, 4), dtype="float32", box=(64, 32))


def spec(**changes):
    kw = {**GOOD, **changes}
    return tma.tiled_spec(kw.pop("address"), kw.pop("shape"), kw.pop("strides"), kw.pop("dtype"),
                          kw.pop("box"), **kw)


# --- validation: one case per rule ------------------------------------------------------------------

@pytest.mark.parametrize("changes,message", [
    (dict(shape=(), strides=(), box=()), r"rank: expected 1 to 5 dimensions, got 0"),
    (dict(shape=(2,) * 6, strides=(64,) * 5 + (4,), box=(1,) * 5 + (4,)), r"rank: expected 1 to 5 .* got 6"),
    (dict(dtype="complex64"), r"dtype: expected one of .* got complex64"),
    (dict(dtype="bool"), r"dtype: expected one of .* got bool"),
    (dict(address=0x10008), r"address: expected a 16-byte aligned .* got 0x10008"),
    (dict(address=0x10040, swizzle=128), r"address: expected a 128-byte aligned .* 128-byte swizzle"),
    (dict(shape=(0, 1000)), r"shape\[0\]: expected 1 to 2\*\*32 elements, got 0"),
    (dict(shape=(2 ** 32 + 1, 1000)), r"shape\[0\]: expected 1 to 2\*\*32"),
    (dict(strides=(4000, 8)), r"strides\[-1\]: expected .* contiguous, a stride of 4 bytes .* got 8"),
    (dict(strides=(4004, 4)), r"strides\[0\]: expected a positive multiple of 16 bytes .* got 4004"),
    (dict(strides=(2 ** 40, 4)), r"strides\[0\]: expected .* below 2\*\*40, got 1099511627776"),
    (dict(strides=(-4000, 4)), r"strides\[0\]: expected a positive multiple"),
    (dict(strides=(4000,)), r"strides: expected 2 values .* got 1"),
    (dict(box=(0, 32)), r"box\[0\]: expected 1 to 256 elements, got 0"),
    (dict(box=(257, 32)), r"box\[0\]: expected 1 to 256 elements, got 257"),
    (dict(box=(64, 2)), r"box\[-1\]: expected .* multiple of 16 bytes, got 2 x 4 = 8 bytes"),
    (dict(box=(64, 32), swizzle=64), r"box\[-1\]: expected at most 64 bytes .* 64-byte swizzle .* got 128"),
    (dict(box=(64, 16), swizzle=32), r"box\[-1\]: expected at most 32 bytes .* got 64"),
    (dict(elem_strides=(0, 1)), r"elem_strides\[0\]: expected 1 to 8, got 0"),
    (dict(elem_strides=(9, 1)), r"elem_strides\[0\]: expected 1 to 8, got 9"),
    (dict(elem_strides=(1, 2)), r"elem_strides\[-1\]: expected 1 .* got 2"),
    (dict(swizzle=16), r"swizzle: expected None or one of \(0, 32, 64, 128\) .* got 16"),
    (dict(swizzle=True), r"swizzle: expected None or one of"),
    (dict(l2_promotion=32), r"l2_promotion: expected None or one of \(0, 64, 128, 256\) .* got 32"),
    (dict(oob_fill="inf"), r"oob_fill: expected one of \('zero', 'nan'\), got 'inf'"),
    (dict(dtype="int32", oob_fill="nan"), r"oob_fill: 'nan' needs a floating-point dtype .* got int32"),
    (dict(dtype="uint8", strides=(1008, 1), box=(64, 16), oob_fill="nan"), r"got uint8"),
])
def test_every_rule_raises_a_value_error_naming_what_was_expected(changes, message):
    with pytest.raises(ValueError, match=message):
        spec(**changes)


def test_stride_error_suggests_a_padded_row():
    with pytest.raises(ValueError, match=r"allocate 1008 columns instead of 1000"):
        spec(dtype="uint8", strides=(1000, 1), box=(64, 16))


def test_tensor_map_refuses_a_host_array():
    with pytest.raises(ValueError, match=r"x: expected a CUDA device array .* got numpy.ndarray"):
        tma.tensor_map(np.zeros((4, 4), np.float32), box=(4, 4))


@pytest.mark.parametrize("name", ["uint8", "int8", "float16", "bfloat16", "float32", "int32",
                                  "float8_e4m3fn", "float8_e5m2"])
def test_the_book_dtypes_are_accepted(name):
    s = spec(dtype=name, strides=(1024, tma.resolve_dtype(name).itemsize), box=(8, 16))
    assert s.dtype.name == name


# --- the driver's view: innermost first ------------------------------------------------------------

def test_spec_converts_to_the_driver_order():
    s = spec(shape=(3, 1000, 1000), strides=(4_000_000, 4000, 4), box=(2, 64, 32), swizzle=128,
             elem_strides=(1, 2, 1))
    assert s.driver_dims == [1000, 1000, 3]
    assert s.driver_strides == [4000, 4_000_000]           # the innermost has no stride entry
    assert s.driver_box == [32, 64, 2]
    assert s.driver_elem_strides == [1, 2, 1]
    assert s.smem_box == (2, 32, 32)                         # 64 rows taken every second one
    assert s.box_bytes == 2 * 32 * 32 * 4
    assert s.smem_bytes == 2 * 32 * 128 and s.smem_align == 1024


@pytest.mark.parametrize("dtype,cols,pitch,spill", [
    ("uint8", 203, 224, 5), ("bfloat16", 203, 432, 10), ("float32", 203, 832, 4),
    ("uint8", 1000, 1024, 8), ("bfloat16", 1000, 2016, 0), ("float32", 1000, 4000, 0),
])
def test_a_store_may_spill_up_to_the_rows_next_16_byte_boundary(dtype, cols, pitch, spill):
    # the widths of the GPU test: 203, 406, 812 and 1000 bytes spilled there, 2000 and 4000 did not
    itemsize = tma.resolve_dtype(dtype).itemsize
    s = spec(shape=(37, cols), strides=(pitch, itemsize), dtype=dtype, box=(64, 16 // itemsize))
    assert s.store_spill_bytes == spill
    assert (cols * itemsize + spill) % tma.STORE_GRANULE == 0


def test_a_narrow_box_under_a_wide_swizzle_occupies_the_whole_span():
    s = spec(box=(64, 16), swizzle=128)       # 64-byte rows, 128-byte swizzle
    assert s.inner_bytes == 64 and s.box_bytes == 64 * 64 and s.smem_bytes == 64 * 128


class FakeEncoder:
    """Stands in for cuda.bindings.driver.cuTensorMapEncodeTiled and remembers what it was given."""

    def __init__(self, words=None, fail=False):
        self.words = list(range(1, 17)) if words is None else words
        self.fail, self.calls = fail, []

    def __call__(self, *args):
        from cuda.bindings import driver as cu
        self.calls.append(args)
        if self.fail:
            return cu.CUresult.CUDA_ERROR_INVALID_VALUE, None
        out = cu.CUtensorMap()
        out.opaque = self.words
        return cu.CUresult.CUDA_SUCCESS, out


@pytest.fixture
def fake_encoder(monkeypatch):
    from cuda.bindings import driver as cu
    enc = FakeEncoder()
    monkeypatch.setattr(cu, "cuTensorMapEncodeTiled", enc)
    return enc


def test_encode_passes_innermost_first_lists_and_the_enums(fake_encoder):
    from cuda.bindings import driver as cu
    x = DeviceArrayStandIn((37, 200), "bfloat16", ptr=0x7f0000000400, strides=(512, 2))
    tma.tensor_map(x, box=(16, 64), swizzle=128, l2_promotion=256, oob_fill="nan")
    (dtype, rank, address, dims, strides, box, elem, interleave, swizzle, l2, fill), = fake_encoder.calls
    assert dtype == cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert (rank, address) == (2, 0x7f0000000400)
    assert [int(v) for v in dims] == [200, 37] and all(isinstance(v, cu.cuuint64_t) for v in dims)
    assert [int(v) for v in strides] == [512] and all(isinstance(v, cu.cuuint64_t) for v in strides)
    assert [int(v) for v in box] == [64, 16] and all(isinstance(v, cu.cuuint32_t) for v in box)
    assert [int(v) for v in elem] == [1, 1] and all(isinstance(v, cu.cuuint32_t) for v in elem)
    assert interleave == cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE
    assert swizzle == cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert l2 == cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B
    assert fill == cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA


@pytest.mark.parametrize("swizzle,name", [(0, "NONE"), (32, "32B"), (64, "64B"), (128, "128B")])
def test_encode_names_each_swizzle(fake_encoder, swizzle, name):
    from cuda.bindings import driver as cu
    tma.tiled(0x10000, (64, 64), (256, 4), "float32", (8, max(swizzle, 16) // 4), swizzle=swizzle)
    assert fake_encoder.calls[0][8] == getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + name)


def test_contiguous_arrays_get_their_strides_computed(fake_encoder):
    x = DeviceArrayStandIn((5, 6, 8), "float16")            # no strides: C-contiguous
    m = tma.tensor_map(x, box=(1, 2, 8))
    assert m.spec.strides == (96, 16, 2)
    assert [int(v) for v in fake_encoder.calls[0][4]] == [16, 96]


def test_the_descriptor_is_128_bytes_aligned_and_keeps_its_array_alive(fake_encoder):
    x = DeviceArrayStandIn((64, 64), "float32")
    m = tma.tensor_map(x, box=(8, 8))
    words = np.asarray(fake_encoder.words, dtype=np.uint64).tobytes()
    assert isinstance(m.descriptor, np.void) and m.descriptor.dtype == np.dtype((np.void, 128))
    assert m.descriptor.tobytes() == words
    assert m.arg.shape == (1,) and m.arg.dtype == tma.DESCRIPTOR_DTYPE and m.arg.tobytes() == words
    assert m.arg.ctypes.data % 64 == 0
    assert m.owner is x


def test_a_driver_error_is_raised_with_the_spec(monkeypatch):
    from cuda.bindings import driver as cu
    monkeypatch.setattr(cu, "cuTensorMapEncodeTiled", FakeEncoder(fail=True))
    with pytest.raises(RuntimeError, match=r"cuTensorMapEncodeTiled failed .*INVALID_VALUE"):
        tma.tiled(0x10000, (64, 64), (256, 4), "float32", (8, 8))


def test_a_descriptor_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match=r"descriptor: expected 128 bytes, got 64"):
        tma.TensorMap(spec(), bytes(64))


# --- the swizzle model ------------------------------------------------------------------------------

@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_the_swizzle_permutes_each_repeat_onto_itself(swizzle):
    repeat = tma.swizzle_repeat(swizzle)
    offsets = np.arange(4 * max(repeat, 1024))
    moved = tma.swizzle_offset(offsets, swizzle)
    assert np.array_equal(np.sort(moved), offsets), "not a bijection"
    assert np.array_equal(moved // repeat, offsets // repeat), "a byte left its repeat (atom)"
    assert np.array_equal(moved // 128, offsets // 128), "a byte left its 128-byte line"
    assert np.array_equal(moved % 16, offsets % 16), "a 16-byte chunk was split"


def test_no_swizzle_is_the_identity():
    offsets = np.arange(4096)
    assert np.array_equal(tma.swizzle_offset(offsets, 0), offsets)
    assert np.array_equal(tma.swizzle_offset(offsets, None), offsets)


def test_the_128_byte_pattern_xors_the_chunk_with_the_line():
    p = tma.swizzle_pattern(128)
    assert p[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert p[1].tolist() == [1, 0, 3, 2, 5, 4, 7, 6]
    assert p[2].tolist() == [2, 3, 0, 1, 6, 7, 4, 5]
    assert p[7].tolist() == [7, 6, 5, 4, 3, 2, 1, 0]
    assert np.array_equal(tma.swizzle_pattern(128, lines=16)[8:], p), "repeats after 8 lines (1024 B)"


def test_the_64_and_32_byte_patterns_use_two_and_one_line_bits():
    p64, p32 = tma.swizzle_pattern(64), tma.swizzle_pattern(32)
    chunks = np.arange(8)
    for line in range(8):
        assert p64[line].tolist() == (chunks ^ (line % 4)).tolist()
        assert p32[line].tolist() == (chunks ^ (line % 2)).tolist()
    assert tma.swizzle_repeat(64) == 512 and tma.swizzle_repeat(32) == 256


@pytest.mark.parametrize("swizzle,itemsize,inner", [(0, 4, 32), (32, 2, 16), (64, 1, 64), (128, 4, 32),
                                                    (128, 2, 32), (64, 4, 8)])
def test_box_offsets_cover_the_box_once(swizzle, itemsize, inner):
    rows = 24
    off = tma.smem_byte_offsets((rows, inner), itemsize, swizzle)
    pitch = tma.smem_row_pitch(inner * itemsize, swizzle)
    assert off.shape == (rows, inner, itemsize)
    assert len(np.unique(off)) == off.size and off.min() == 0 and off.max() < rows * pitch
    assert np.array_equal(off // pitch, np.broadcast_to(np.arange(rows)[:, None, None], off.shape)), \
        "an element left its row"
    if inner * itemsize == pitch:
        assert np.array_equal(np.sort(off.ravel()), np.arange(rows * pitch)), "a full-width box is dense"


def test_smem_image_places_each_byte_by_the_xor_rule():
    seed = 20261201
    tile = np.random.default_rng(seed).integers(0, 256, (16, 128), dtype=np.uint8)
    image, written = tma.smem_image(tile, 128)
    assert written.all() and image.size == 16 * 128
    for r in range(16):
        for c in range(128):
            at = r * 128 + (((c // 16) ^ (r % 8)) * 16) + c % 16
            assert image[at] == tile[r, c], f"row {r} col {c} (seed {seed})"


def test_a_3d_box_lays_out_like_its_rows_flattened():
    flat = tma.smem_byte_offsets((6, 32), 4, 128)
    assert np.array_equal(tma.smem_byte_offsets((2, 3, 32), 4, 128).reshape(6, 32, 4), flat)


def test_smem_image_of_a_narrow_box_leaves_the_padding_unwritten():
    tile = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)       # 64-byte rows under a 128-byte swizzle
    image, written = tma.smem_image(tile, 128, fill=0xA5)
    assert image.size == 8 * 128 and written.sum() == tile.nbytes
    assert (image[~written] == 0xA5).all()
    row3 = image[3 * 128:4 * 128].view(np.float32)
    # chunks 0..3 of line 3 land in chunks 3, 2, 1, 0
    assert row3[12:16].tolist() == tile[3, 0:4].tolist() and row3[0:4].tolist() == tile[3, 12:16].tolist()


# --- kernels.tma_copy host side ---------------------------------------------------------------------

def test_boxes_fill_the_edges_with_zeros():
    seed = 17
    x = np.random.default_rng(seed).standard_normal((5, 7)).astype(np.float32)
    b = K.boxes(x, (2, 4))
    assert b.shape == (3, 2, 2, 4)
    assert np.array_equal(b[1, 0], x[2:4, 0:4]) and np.array_equal(b[2, 1, 0, :3], x[4, 4:7])
    assert (b[2, 1, 1] == 0).all() and (b[2, 1, 0, 3] == 0), f"seed {seed}"


def test_reference_smem_without_swizzle_is_each_box_in_row_order():
    seed = 5
    x = np.random.default_rng(seed).integers(0, 256, (40, 48), dtype=np.uint8)
    image, written = K.reference_smem(x, (16, 32), 0)
    assert image.shape == (3, 2, 16 * 32) and written.all()
    assert np.array_equal(image[1, 0].reshape(16, 32), x[16:32, 0:32]), f"seed {seed}"
    assert np.array_equal(image[2, 1].reshape(16, 32)[:8, :16], x[32:40, 32:48])


def test_the_batched_image_agrees_with_one_box_at_a_time():
    seed = 99
    x = np.random.default_rng(seed).standard_normal((70, 33)).astype(np.float32)
    image, _ = K.reference_smem(x, (32, 16), 64)
    tiles = K.boxes(x, (32, 16))
    for by in range(tiles.shape[0]):
        for bx in range(tiles.shape[1]):
            assert np.array_equal(image[by, bx], tma.smem_image(tiles[by, bx], 64, fill=0xA5)[0]), \
                f"box ({by}, {bx}), seed {seed}"


def map_without_driver(**changes) -> tma.TensorMap:
    return tma.TensorMap(spec(**changes), bytes(128))


def test_box_grid_counts_partial_boxes():
    assert K.box_grid(spec()) == (32, 16, 1)                # 1000 / 32 columns, 1000 / 64 rows


@pytest.mark.parametrize("make,message", [
    (lambda: np.zeros(128, np.uint8), r"tmap: expected a utils.tma.TensorMap"),
    (lambda: map_without_driver(shape=(4, 64, 64), strides=(16384, 256, 4), box=(1, 8, 8)),
     r"tmap: expected a 2-D tensor map, got rank 3"),
    (lambda: map_without_driver(elem_strides=(2, 1)), r"expected element strides \(1, 1\), got \(2, 1\)"),
    (lambda: map_without_driver(dtype="float64", strides=(8000, 8), box=(256, 256)),
     r"the box needs 524288 bytes of shared memory"),
])
def test_launchers_refuse_maps_the_kernels_cannot_take(make, message):
    with pytest.raises(ValueError, match=message):
        K.check_map_2d(make(), "tmap")


@pytest.mark.parametrize("changes,field", [(dict(swizzle=128), "swizzle"), (dict(box=(32, 32)), "box"),
                                           (dict(shape=(999, 1000)), "shape")])
def test_roundtrip_refuses_maps_that_disagree(changes, field):
    with pytest.raises(ValueError, match=rf"dst: expected the same {field} as src"):
        K.roundtrip(map_without_driver(), map_without_driver(**changes))


def test_the_plans_launch_one_cta_per_box_with_aligned_shared_memory():
    m = map_without_driver(swizzle=128)
    ln, = K.plan_load_box_raw(m, out=None, status=None)
    assert ln.grid == (32, 16, 1) and ln.block == (K.THREADS, 1, 1)
    assert ln.smem == m.spec.smem_bytes + 1024 and ln.args[0] is m.arg
    assert [int(a) for a in ln.args[2:6]] == [32, 64, 8192, 8192]
    rt, = K.plan_roundtrip(m, m, status=None)
    assert rt.grid == ln.grid and rt.smem == ln.smem and [int(a) for a in rt.args[2:5]] == [32, 64, 8192]


def test_the_kernel_file_has_its_snippets_and_declares_tma():
    from utils.build import KernelSource
    from utils.show import snippets
    assert {"tma_load_box", "tma_roundtrip"} <= set(snippets(K.SOURCE.path.read_text()))
    assert isinstance(K.SOURCE, KernelSource)       # a module-level KernelSource: test_compile builds it
    assert K.SOURCE.requires == ("tma",)
    assert K.SOURCE.arch("sm_80") == "sm_90"        # built for Hopper even where it cannot run
