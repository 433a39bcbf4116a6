"""utils.tma on a Hopper GPU, through kernels/tma_copy.cu: for every swizzle mode, dtype and box shape,

- the bytes a TMA load leaves in shared memory are exactly where the swizzle model says
  (``utils.tma.smem_image``), zero-filled past the tensor's edge;
- a load followed by a store reproduces the tensor exactly, and writes nothing outside it (the
  destination sits in a larger poisoned buffer: padded rows and guard rows) except the row tail a TMA
  store is known to write: it clips in whole 16-byte chunks of global memory, so where a row's byte
  width is not a multiple of 16 the bytes up to the next 16-byte boundary may be overwritten, here with
  the load's zero fill (the first H200 run found a stray byte right at the row's end for every such
  width, 203, 406, 812 and 1000 bytes, and none for 2000 and 4000; Triton issue 11583 reports 16-byte
  granularity on H100, and CUTLASS refuses TMA epilogues whose contiguous extent is not a multiple of
  16 bytes).

Tensors live in byte buffers with padded rows, so the row stride differs from the row width; maps are
built with ``tma.tiled`` on those buffers (one test goes through ``tma.tensor_map`` on a CuPy array).
Inputs are random bytes (every bit pattern, NaNs included, compared bit for bit) from a fresh seed that
every failure message names.
"""
import dataclasses

import numpy as np
import pytest

from utils.gpu import has_gpu, supports

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(has_gpu() and not supports("tma"), reason="needs TMA (sm_90)")]

POISON = 0xFF             # NaN in float32 and bfloat16, the largest uint8
STORE_GRANULE = 16        # bytes: a TMA store writes global memory in whole 16-byte chunks
OOB_FILL = 0x00           # what a loaded box holds past the tensor's edge (the zero fill)
GUARD_ROWS = 3
ROW_PAD = 16              # bytes past each row's 16-byte boundary: the stride is never the row width,
                          # and these bytes no store may touch
SWIZZLES = (0, 32, 64, 128)
DTYPES = ("bfloat16", "float32", "uint8")
SHAPES = ((1000, 1000), (37, 203))     # neither a multiple of any box below


ITEMSIZE = {"bfloat16": 2, "float32": 4, "uint8": 1}   # plain numbers: collection needs no ml_dtypes


def itemsize(dtype: str) -> int:
    return ITEMSIZE[dtype]


def need_dtype(dtype: str) -> None:
    """Skip (not fail) where bfloat16's NumPy type is missing."""
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")


def full_width_box(swizzle: int, dtype: str, rows: int = 64) -> tuple[int, int]:
    """A box whose rows span the swizzle (128 bytes without one)."""
    return rows, (swizzle or 128) // itemsize(dtype)


CASES = [(s, d, shape, full_width_box(s, d)) for s in SWIZZLES for d in DTYPES for shape in SHAPES]
CASES += [
    (128, "bfloat16", (1000, 1000), (24, 32)),      # 64-byte rows under a 128-byte swizzle
    (64, "float32", (37, 203), (40, 8)),            # 32-byte rows under a 64-byte swizzle
    (128, "float32", (1000, 1000), (5, 32)),        # fewer rows than one swizzle atom
    (0, "uint8", (37, 203), (256, 16)),             # the tallest box, taller than the tensor
]


def case_id(case) -> str:
    swizzle, dtype, (rows, cols), (br, bc) = case
    return f"swz{swizzle}-{dtype}-{rows}x{cols}-box{br}x{bc}"


def fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**32)


@dataclasses.dataclass
class DeviceMatrix:
    """A rows x cols matrix of ``dtype`` inside a poisoned uint8 buffer of GUARD_ROWS more rows and
    ROW_PAD more bytes per row."""
    base: object            # cupy uint8 [rows + GUARD_ROWS, pitch]
    rows: int
    cols: int
    dtype: str

    @property
    def width(self) -> int:
        return self.cols * itemsize(self.dtype)

    @property
    def pitch(self) -> int:
        return self.base.shape[1]

    def tensor_map(self, box, swizzle):
        from utils import tma
        return tma.tiled(self.base.data.ptr, (self.rows, self.cols), (self.pitch, itemsize(self.dtype)),
                         self.dtype, box, swizzle=swizzle, owner=self.base)

    def inside(self):
        return self.base[:self.rows, :self.width]


def device_matrix(rows: int, cols: int, dtype: str, host_bytes=None) -> DeviceMatrix:
    import cupy
    width = cols * itemsize(dtype)
    pitch = -(-width // 16) * 16 + ROW_PAD
    base = cupy.full((rows + GUARD_ROWS, pitch), POISON, dtype=cupy.uint8)
    m = DeviceMatrix(base, rows, cols, dtype)
    if host_bytes is not None:
        m.inside()[...] = cupy.asarray(host_bytes)
    return m


def random_bytes(rows: int, cols: int, dtype: str, seed: int) -> np.ndarray:
    """uint8 [rows, cols * itemsize]: every bit pattern of the dtype is possible."""
    return np.random.default_rng(seed).integers(0, 256, (rows, cols * itemsize(dtype)), dtype=np.uint8)


def as_elements(host_bytes: np.ndarray, dtype: str) -> np.ndarray:
    from utils.tma import resolve_dtype
    return host_bytes.view(resolve_dtype(dtype))


def describe_mismatch(got: np.ndarray, want: np.ndarray, where: str) -> str:
    bad = np.argwhere(got != want)
    first = tuple(int(i) for i in bad[0])
    return (f"{len(bad)} bytes differ {where}; first at index {first}: got {int(got[first]):#04x}, "
            f"expected {int(want[first]):#04x}")


def store_tail_end(width: int) -> int:
    """Byte offset in a row up to which a store may write: the row's end rounded up to STORE_GRANULE
    (rows start 16-byte aligned: the allocation is, and the pitch is a multiple of 16)."""
    return -(-width // STORE_GRANULE) * STORE_GRANULE


def describe_writes(written: np.ndarray, values: np.ndarray, rows: int, width: int) -> str:
    """Where the ``written`` mask is set, for a failure message: how many bytes, which rows (guard rows
    counted apart), which byte columns relative to the row width, and the values found there."""
    at = np.argwhere(written)
    r, c = at[:, 0], at[:, 1]
    found = np.unique(values[written])
    shown = ", ".join(f"{int(v):#04x}" for v in found[:8]) + (" ..." if len(found) > 8 else "")
    return (f"{len(at)} bytes in rows {int(r.min())}..{int(r.max())} ({int((r >= rows).sum())} of them in "
            f"guard rows), byte columns {int(c.min())}..{int(c.max())} (row width {width}, 16-byte "
            f"boundary {store_tail_end(width)}), first at {(int(r[0]), int(c[0]))}, values {{{shown}}}")


def assert_only_the_tensor_and_its_row_tails_written(out: np.ndarray, host: np.ndarray, rows: int,
                                                     label: str) -> None:
    """``out``: the whole poisoned destination buffer after a round trip of ``host`` (uint8 [rows, width]).
    Inside the tensor every byte must equal ``host``; in each row's tail up to its 16-byte boundary the
    store may have written, but only the zero fill the loaded box holds there; everything else (the rest
    of the row padding, the guard rows) must still be poison."""
    width = host.shape[1]
    inside = out[:rows, :width]
    assert np.array_equal(inside, host), f"{label}: " + \
        describe_mismatch(inside, host, "inside the tensor (index: row, byte)")
    tail_end = store_tail_end(width)
    stray = np.zeros(out.shape, dtype=bool)
    tail = out[:rows, width:tail_end]
    stray[:rows, width:tail_end] = (tail != POISON) & (tail != OOB_FILL)
    assert not stray.any(), f"{label}: the store wrote something other than the zero fill into the row " \
        f"tails past the tensor: " + describe_writes(stray, out, rows, width)
    outside = out != POISON
    outside[:rows, :tail_end] = False
    assert not outside.any(), f"{label}: the store wrote outside the tensor and its rows' 16-byte tails " \
        f"(edge boxes were not clipped): " + describe_writes(outside, out, rows, width)


def random_source(case):
    """(label naming the case and its seed, host bytes, the device matrix holding them)."""
    _, dtype, (rows, cols), _ = case
    need_dtype(dtype)
    seed = fresh_seed()
    host = random_bytes(rows, cols, dtype, seed)
    return f"{case_id(case)}, seed {seed}", host, device_matrix(rows, cols, dtype, host)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_shared_memory_bytes_are_where_the_swizzle_model_puts_them(case):
    from kernels import tma_copy as K
    swizzle, dtype, _, box = case
    label, host, src = random_source(case)
    raw = K.load_box_raw(src.tensor_map(box, swizzle)).get()
    want, written = K.reference_smem(as_elements(host, dtype), box, swizzle)
    assert raw.shape == want.shape, f"{label}: {raw.shape} vs {want.shape}"
    got, exp = raw[..., written], want[..., written]
    assert np.array_equal(got, exp), f"{label}: " + describe_mismatch(
        got, exp, "in the boxes' shared memory (index: box row, box column, written byte)")


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_load_then_store_reproduces_the_tensor_and_nothing_else(case):
    from kernels import tma_copy as K
    swizzle, dtype, (rows, cols), box = case
    label, host, src = random_source(case)
    dst = device_matrix(rows, cols, dtype)                      # poisoned everywhere
    dst_map = dst.tensor_map(box, swizzle)
    assert dst_map.spec.store_spill_bytes == store_tail_end(dst.width) - dst.width, label
    K.roundtrip(src.tensor_map(box, swizzle), dst_map)
    assert_only_the_tensor_and_its_row_tails_written(dst.base.get(), host, rows, label)


def test_tensor_map_of_a_cupy_array_round_trips():
    import cupy

    from kernels import tma_copy as K
    from utils import tma
    seed = fresh_seed()
    x = cupy.asarray(np.random.default_rng(seed).standard_normal((300, 200)).astype(np.float32))
    y = cupy.full_like(x, np.nan)
    K.roundtrip(tma.tensor_map(x, box=(64, 32), swizzle=128), tma.tensor_map(y, box=(64, 32), swizzle=128))
    assert cupy.array_equal(x, y), f"seed {seed}"


def test_a_padded_view_is_mapped_with_its_row_stride():
    import cupy

    from kernels import tma_copy as K
    from utils import tma
    seed = fresh_seed()
    buf = cupy.asarray(np.random.default_rng(seed).integers(0, 256, (50, 112), dtype=np.uint8))
    view = buf[:, :100]                                       # row stride 112, width 100
    m = tma.tensor_map(view, box=(16, 32), swizzle=32)
    assert m.spec.strides == (112, 1) and m.owner is view
    raw = K.load_box_raw(m).get()
    want, written = K.reference_smem(view.get(), (16, 32), 32)
    assert np.array_equal(raw[..., written], want[..., written]), f"seed {seed}"


def test_the_descriptor_as_a_numpy_void_scalar_launches_too():
    """DESIGN.md: the 128-byte numpy.void passed by value (CuPy's scalar path) copies tiles exactly."""
    import cupy

    from kernels import tma_copy as K
    from utils.version import bind_launches
    seed = fresh_seed()
    host = random_bytes(64, 64, "float32", seed)
    src = device_matrix(64, 64, "float32", host)
    m = src.tensor_map((64, 32), 128)
    out = cupy.zeros((1, 2, m.spec.smem_bytes), dtype=cupy.uint8)
    status = cupy.zeros(1, dtype=cupy.int32)
    ln, = K.plan_load_box_raw(m, out, status)
    assert isinstance(m.descriptor, np.void)
    bind_launches([dataclasses.replace(ln, args=(m.descriptor, *ln.args[1:]))], K.SOURCE)()
    assert int(status.get()[0]) == 0
    want, _ = K.reference_smem(as_elements(host, "float32"), (64, 32), 128)
    assert np.array_equal(out.get(), want), f"seed {seed}"


def test_a_wrong_byte_count_fails_within_a_second_instead_of_hanging():
    import cupy

    from kernels import tma_copy as K
    from utils.check import CheckFailed
    from utils.version import bind_launches
    src = device_matrix(8, 32, "float32", random_bytes(8, 32, "float32", 0))
    m = src.tensor_map((8, 32), 0)
    out = cupy.zeros((1, 1, m.spec.smem_bytes), dtype=cupy.uint8)
    status = cupy.zeros(1, dtype=cupy.int32)
    ln, = K.plan_load_box_raw(m, out, status)
    too_many = np.uint32(m.spec.box_bytes + 16)            # TMA will never deliver these 16 bytes
    bind_launches([dataclasses.replace(ln, args=(*ln.args[:4], too_many, *ln.args[5:]))], K.SOURCE)()
    with pytest.raises(CheckFailed, match="never completed"):
        K.raise_on_status(status, "tma_copy_load_box_raw", m.spec)
