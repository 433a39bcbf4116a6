"""TMA tensor maps from Python, and a model of where TMA puts a box in shared memory.

A tensor map (``CUtensorMap``) is the 128-byte descriptor that tells Hopper's Tensor Memory Accelerator
how a global tensor is laid out (element type, sizes, byte strides) and which box one
``cp.async.bulk.tensor`` moves (box sizes, element strides, shared-memory swizzle, out-of-bounds fill).
The driver builds it (``cuTensorMapEncodeTiled``); the kernel takes it by value as a
``const __grid_constant__`` parameter of 128 bytes aligned to 64.

Dimension order: everything here is given the NumPy way, **outermost first** (``shape=(rows, cols)``,
``box=(box_rows, box_cols)``). The driver and PTX count the other way, innermost first (``globalDim[0]``
is the number of columns, the first TMA coordinate is the column); :class:`TiledSpec` converts, and its
``driver_*`` properties show the innermost-first lists exactly as the driver receives them.

Every rule the driver documents for a tiled map is checked before the driver is called, each failure a
``ValueError`` saying what was expected and what came. Nothing here needs a GPU until :func:`encode`
runs: ``cuda.bindings`` is imported there, lazily.

The swizzle model (:func:`swizzle_offset`, :func:`smem_byte_offsets`, :func:`smem_image`) is the
shared-memory image a TMA load writes; the GPU test compares the bytes a kernel finds in shared memory
with it, and chapter 17 draws it.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

SWIZZLES = (0, 32, 64, 128)          # bytes; 0 = no swizzle
L2_PROMOTIONS = (0, 64, 128, 256)    # bytes; 0 = none
OOB_FILLS = ("zero", "nan")          # "nan": CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
MAX_RANK = 5
MAX_BOX = 256                        # elements per box dimension
MAX_ELEM_STRIDE = 8
MAX_GLOBAL_DIM = 2 ** 32
MAX_GLOBAL_STRIDE = 2 ** 40          # bytes, exclusive
GLOBAL_ALIGN = 16                    # bytes: the driver's rule for the global address and strides
SWIZZLED_GLOBAL_ALIGN = 128          # bytes: the programming guide's table for the swizzled modes
CHUNK = 16                           # bytes: the swizzle permutes whole 16-byte chunks
LINE = 128                           # bytes: a chunk moves only within its 128-byte line
STORE_GRANULE = 16                   # bytes: a TMA store writes global memory in whole 16-byte chunks
DESCRIPTOR_BYTES = 128
DESCRIPTOR_ALIGN = 64

# TMA copies bits; types without a driver enum of their own travel as the unsigned type of their size.
_DRIVER_TYPE = {
    "uint8": "UINT8", "int8": "UINT8", "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8",
    "uint16": "UINT16", "int16": "UINT16", "float16": "FLOAT16", "bfloat16": "BFLOAT16",
    "uint32": "UINT32", "int32": "INT32", "float32": "FLOAT32",
    "uint64": "UINT64", "int64": "INT64", "float64": "FLOAT64",
}
_FLOAT_TYPES = {"FLOAT16", "BFLOAT16", "FLOAT32", "FLOAT64"}   # where the NaN out-of-bounds fill is allowed

DESCRIPTOR_DTYPE = np.dtype((np.void, DESCRIPTOR_BYTES))


# --- validation ------------------------------------------------------------------------------------

def resolve_dtype(dtype) -> np.dtype:
    """The NumPy dtype for ``dtype`` (bfloat16 and fp8 through ml_dtypes); ValueError if TMA cannot
    move it."""
    name = dtype if isinstance(dtype, str) else getattr(np.dtype(dtype), "name", str(dtype))
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes
        dt = np.dtype(getattr(ml_dtypes, name))
    else:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"dtype: expected one of {sorted(_DRIVER_TYPE)}, got {dtype!r}") from None
    if dt.name not in _DRIVER_TYPE:
        raise ValueError(f"dtype: expected one of {sorted(_DRIVER_TYPE)}, got {dt.name}")
    return dt


def check_swizzle(swizzle) -> int:
    """0, 32, 64 or 128 (None means 0); ValueError otherwise."""
    s = 0 if swizzle is None else swizzle
    if isinstance(s, bool) or s not in SWIZZLES:
        raise ValueError(f"swizzle: expected None or one of {SWIZZLES} (bytes), got {swizzle!r}")
    return int(s)


def _int_tuple(values, name: str, rank: int) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except TypeError:
        raise ValueError(f"{name}: expected a sequence of {rank} integers, got {values!r}") from None
    if len(out) != rank:
        raise ValueError(f"{name}: expected {rank} values (one per dimension, outermost first), "
                         f"got {len(out)}: {out}")
    return out


@dataclasses.dataclass(frozen=True)
class TiledSpec:
    """A validated tiled tensor map, before the driver encodes it. Dimensions outermost first.

    ``shape``: elements per dimension; ``strides``: bytes per step in each dimension (the innermost is
    the element size: TMA reads the innermost dimension contiguously); ``box``: elements the box spans
    in each dimension; ``elem_strides``: TMA takes every k-th element of a dimension (the box then
    holds ``ceil(box / k)`` of them).
    """

    address: int
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    elem_strides: tuple[int, ...]
    swizzle: int
    l2_promotion: int
    oob_fill: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def smem_box(self) -> tuple[int, ...]:
        """Elements the box holds in shared memory per dimension (element strides applied)."""
        return tuple(math.ceil(b / e) for b, e in zip(self.box, self.elem_strides))

    @property
    def inner_bytes(self) -> int:
        """Bytes of one innermost row of the box (the rule of 16 and the swizzle limit apply to it)."""
        return self.box[-1] * self.itemsize

    @property
    def box_bytes(self) -> int:
        """Bytes one load delivers: the transaction count to announce on the mbarrier (expect_tx).
        Out-of-bounds elements are filled, never skipped, so a box at the edge delivers as many."""
        return math.prod(self.smem_box) * self.itemsize

    @property
    def store_spill_bytes(self) -> int:
        """Bytes past the end of each innermost row that a TMA store of an edge box may overwrite.

        A store clips the box to the tensor's bounds only at the granularity of whole 16-byte chunks of
        global memory (seen on H100 and H200; CUTLASS's TMA epilogues avoid it by refusing a contiguous
        extent that is not a multiple of 16 bytes). Rows start 16-byte aligned (address and strides are
        checked), so the chunk holding a row's last byte ends ``-row_bytes % 16`` bytes past it, and
        those bytes receive whatever the box holds there (a loaded box: the out-of-bounds fill). Zero
        when the row is a multiple of 16 bytes; otherwise the row padding up to the next 16 bytes must
        be free to overwrite (never another tensor's columns)."""
        return -(self.shape[-1] * self.itemsize) % STORE_GRANULE

    @property
    def smem_bytes(self) -> int:
        """Bytes of shared memory the box occupies: rows of :func:`smem_row_pitch` bytes."""
        return math.prod(self.smem_box[:-1]) * smem_row_pitch(self.inner_bytes, self.swizzle)

    @property
    def smem_align(self) -> int:
        """Alignment of the shared-memory destination under which :func:`smem_image` holds."""
        return swizzle_repeat(self.swizzle) if self.swizzle else 128

    # what the driver receives, innermost first
    @property
    def driver_dims(self) -> list[int]:
        return list(reversed(self.shape))

    @property
    def driver_strides(self) -> list[int]:
        """Byte strides of dimensions 1..rank-1 (innermost first): the innermost has none."""
        return list(reversed(self.strides[:-1]))

    @property
    def driver_box(self) -> list[int]:
        return list(reversed(self.box))

    @property
    def driver_elem_strides(self) -> list[int]:
        return list(reversed(self.elem_strides))


def tiled_spec(address: int, shape, strides, dtype, box, *, swizzle=0, elem_strides=None,
               l2_promotion=0, oob_fill: str = "zero") -> TiledSpec:
    """Check every rule of ``cuTensorMapEncodeTiled`` and return the :class:`TiledSpec`.

    ``shape``, ``strides`` (bytes) and ``box`` are outermost first, as NumPy gives them. Raises
    ValueError on the first broken rule.
    """
    dt = resolve_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"rank: expected 1 to {MAX_RANK} dimensions, got {rank} (shape {shape})")
    strides = _int_tuple(strides, "strides", rank)
    box = _int_tuple(box, "box", rank)
    elem_strides = (1,) * rank if elem_strides is None else _int_tuple(elem_strides, "elem_strides", rank)
    swizzle = check_swizzle(swizzle)
    address = int(address)
    _check_global(address, shape, strides, dt, swizzle)
    _check_box(box, elem_strides, dt, swizzle)
    l2 = 0 if l2_promotion is None else l2_promotion
    if l2 not in L2_PROMOTIONS:
        raise ValueError(f"l2_promotion: expected None or one of {L2_PROMOTIONS} (bytes), "
                         f"got {l2_promotion!r}")
    if oob_fill not in OOB_FILLS:
        raise ValueError(f"oob_fill: expected one of {OOB_FILLS}, got {oob_fill!r}")
    if oob_fill == "nan" and _DRIVER_TYPE[dt.name] not in _FLOAT_TYPES:
        raise ValueError(f"oob_fill: 'nan' needs a floating-point dtype the driver knows "
                         f"({sorted(_FLOAT_TYPES)}), got {dt.name}")
    return TiledSpec(address, dt, shape, strides, box, elem_strides, swizzle, int(l2), oob_fill)


def _check_global(address: int, shape, strides, dt: np.dtype, swizzle: int) -> None:
    align = SWIZZLED_GLOBAL_ALIGN if swizzle else GLOBAL_ALIGN
    if address % align:
        why = f"with a {swizzle}-byte swizzle" if swizzle else "for TMA"
        raise ValueError(f"address: expected a {align}-byte aligned global address {why}, got {address:#x} "
                         f"({address % align} bytes past the boundary); pass a fresh allocation")
    for i, n in enumerate(shape):
        if not 1 <= n <= MAX_GLOBAL_DIM:
            raise ValueError(f"shape[{i}]: expected 1 to 2**32 elements, got {n} (shape {shape})")
    if strides[-1] != dt.itemsize:
        raise ValueError(f"strides[-1]: expected the innermost dimension to be contiguous, a stride of "
                         f"{dt.itemsize} bytes ({dt.name}), got {strides[-1]} bytes; TMA cannot step "
                         "over elements of the innermost dimension in global memory")
    for i, s in enumerate(strides[:-1]):
        if s <= 0 or s % GLOBAL_ALIGN or s >= MAX_GLOBAL_STRIDE:
            raise ValueError(f"strides[{i}]: expected a positive multiple of {GLOBAL_ALIGN} bytes below "
                             f"2**40, got {s} bytes (strides {tuple(strides)}); pad the rows, e.g. allocate "
                             f"{_padded_row_hint(shape, dt)} and slice")


def _padded_row_hint(shape, dt: np.dtype) -> str:
    cols = shape[-1]
    per = GLOBAL_ALIGN // math.gcd(GLOBAL_ALIGN, dt.itemsize)
    return f"{-(-cols // per) * per} columns instead of {cols}"


def _check_box(box, elem_strides, dt: np.dtype, swizzle: int) -> None:
    for i, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise ValueError(f"box[{i}]: expected 1 to {MAX_BOX} elements, got {b} (box {tuple(box)})")
    for i, e in enumerate(elem_strides):
        if not 1 <= e <= MAX_ELEM_STRIDE:
            raise ValueError(f"elem_strides[{i}]: expected 1 to {MAX_ELEM_STRIDE}, got {e}")
    if elem_strides[-1] != 1:
        raise ValueError(f"elem_strides[-1]: expected 1 (TMA ignores an element stride in the innermost "
                         f"dimension), got {elem_strides[-1]}")
    inner = box[-1] * dt.itemsize
    if inner % CHUNK:
        raise ValueError(f"box[-1]: expected the inner box extent to be a multiple of {CHUNK} bytes, got "
                         f"{box[-1]} x {dt.itemsize} = {inner} bytes")
    if swizzle and inner > swizzle:
        raise ValueError(f"box[-1]: expected at most {swizzle} bytes in the inner box extent with a "
                         f"{swizzle}-byte swizzle ({swizzle // dt.itemsize} {dt.name}), got {inner} bytes")


# --- the descriptor --------------------------------------------------------------------------------

class TensorMap:
    """A 128-byte TMA descriptor and the memory it points at.

    ``descriptor``: the bytes as a ``numpy.void`` of 128 bytes. ``arg``: the same bytes as a one-element
    NumPy array aligned to 64 bytes, the form to pass to a CuPy kernel (CuPy sends a one-element array
    by value, byte for byte; the kernel declares ``const __grid_constant__`` 128-byte aligned(64) struct).
    ``owner``: the array the map reads and writes, kept alive as long as the map is.
    """

    def __init__(self, spec: TiledSpec, raw: bytes, owner=None):
        if len(raw) != DESCRIPTOR_BYTES:
            raise ValueError(f"descriptor: expected {DESCRIPTOR_BYTES} bytes, got {len(raw)}")
        self.spec, self.owner = spec, owner
        self.arg = aligned_descriptor_array(raw)
        self.descriptor = self.arg[0]

    def __repr__(self) -> str:
        s = self.spec
        return (f"TensorMap({s.dtype.name}, shape={s.shape}, box={s.box}, swizzle={s.swizzle}, "
                f"address={s.address:#x})")


def aligned_descriptor_array(raw: bytes) -> np.ndarray:
    """A one-element array of :data:`DESCRIPTOR_DTYPE` holding ``raw``, its data 64-byte aligned (the
    alignment ``CUtensorMap`` declares; the driver and CuPy copy it, so it matters only to C readers)."""
    buf = np.zeros(DESCRIPTOR_BYTES + DESCRIPTOR_ALIGN, dtype=np.uint8)
    start = -buf.ctypes.data % DESCRIPTOR_ALIGN
    out = buf[start:start + DESCRIPTOR_BYTES].view(DESCRIPTOR_DTYPE)
    out[0] = np.frombuffer(bytes(raw), dtype=DESCRIPTOR_DTYPE)[0]
    return out


def encode(spec: TiledSpec) -> bytes:
    """Call ``cuTensorMapEncodeTiled`` for ``spec``; return the 128 descriptor bytes.

    Needs the CUDA driver (a GPU host); raises RuntimeError with the driver's error otherwise.
    """
    from cuda.bindings import driver as cu
    cu64, cu32 = cu.cuuint64_t, cu.cuuint32_t
    swizzle = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[spec.swizzle]
    l2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[spec.l2_promotion]
    fill = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}[spec.oob_fill]
    err, tmap = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DRIVER_TYPE[spec.dtype.name]),
        spec.rank, spec.address,
        [cu64(d) for d in spec.driver_dims], [cu64(s) for s in spec.driver_strides],
        [cu32(b) for b in spec.driver_box], [cu32(e) for e in spec.driver_elem_strides],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + swizzle),
        getattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + l2),
        getattr(cu.CUtensorMapFloatOOBfill, "CU_TENSOR_MAP_FLOAT_OOB_FILL_" + fill))
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with {err!r} for {spec}")
    return np.asarray([int(w) for w in tmap.opaque], dtype=np.uint64).tobytes()


def tiled(address: int, shape, strides, dtype, box, *, swizzle=0, elem_strides=None, l2_promotion=0,
          oob_fill: str = "zero", owner=None) -> TensorMap:
    """A :class:`TensorMap` for raw memory: ``address`` (device pointer), ``shape``, byte ``strides`` and
    ``box``, all outermost first. ``owner`` is kept alive with the map."""
    spec = tiled_spec(address, shape, strides, dtype, box, swizzle=swizzle, elem_strides=elem_strides,
                      l2_promotion=l2_promotion, oob_fill=oob_fill)
    return TensorMap(spec, encode(spec), owner)


def tensor_map(x, box, *, swizzle=0, elem_strides=None, l2_promotion=0, oob_fill: str = "zero") -> TensorMap:
    """A :class:`TensorMap` over the device array ``x`` (CuPy, or anything with
    ``__cuda_array_interface__``), its shape and strides read off the array, ``box`` outermost first.

    A row-padded view works (``buf[:, :n]`` of a wider allocation): its row stride is the allocation's.
    A store through the map may still overwrite up to ``spec.store_spill_bytes`` bytes of the padding
    after each row (see :attr:`TiledSpec.store_spill_bytes`).
    """
    return tiled(*array_layout(x), box, swizzle=swizzle, elem_strides=elem_strides,
                 l2_promotion=l2_promotion, oob_fill=oob_fill, owner=x)


def array_layout(x) -> tuple[int, tuple[int, ...], tuple[int, ...], np.dtype]:
    """(address, shape, byte strides, dtype) of a device array, outermost first."""
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        t = type(x)
        raise ValueError(f"x: expected a CUDA device array (cupy.ndarray), "
                         f"got {t.__module__}.{t.__qualname__}")
    dt = resolve_dtype(x.dtype)
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    if strides is None:
        strides, acc = [], dt.itemsize
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    return int(cai["data"][0]), shape, tuple(int(s) for s in strides), dt


# --- the shared-memory model -----------------------------------------------------------------------

def swizzle_repeat(swizzle: int) -> int:
    """Bytes after which a swizzle pattern repeats: 8 lines of 128 B for 128, 4 for 64, 2 for 32."""
    s = check_swizzle(swizzle)
    return 8 * s if s else CHUNK


def swizzle_offset(offset, swizzle: int):
    """Where TMA puts the byte at ``offset`` of the unswizzled box (an int or an integer array).

    The swizzle is a function of the shared-memory address: within each 128-byte line, the 16-byte
    chunk index (address bits 4..6) is XORed with the line index (bits 7..9), using as many bits as the
    swizzle spans 16-byte chunks: 3 bits for 128 B, 2 for 64 B, 1 for 32 B. In CuTe's notation
    ``Swizzle<3,4,3>``, ``Swizzle<2,4,3>`` and ``Swizzle<1,4,3>`` on byte addresses. Offsets here are
    relative to a destination aligned to :func:`swizzle_repeat`, where relative and absolute agree.
    """
    s = check_swizzle(swizzle)
    if s == 0:
        return offset
    mask = s // CHUNK - 1
    return offset ^ (((offset >> 7) & mask) << 4)


def swizzle_pattern(swizzle: int, lines: int = 8) -> np.ndarray:
    """[lines, 8]: the chunk of its 128-byte line that each 16-byte chunk (column) of each line (row) lands
    in. Row 0 is the identity; under the 128-byte swizzle row r is ``c ^ r``."""
    chunks = np.arange(lines)[:, None] * (LINE // CHUNK) + np.arange(LINE // CHUNK)[None, :]
    return (swizzle_offset(chunks * CHUNK, swizzle) // CHUNK) % (LINE // CHUNK)


def smem_row_pitch(inner_bytes: int, swizzle: int) -> int:
    """Bytes between consecutive box rows in shared memory: the inner extent without a swizzle; the swizzle
    span with one (a narrower box row still occupies the whole span: the programming guide asks to
    allocate "the full swizzle width" when the inner dimension is smaller)."""
    s = check_swizzle(swizzle)
    return s if s else int(inner_bytes)


def smem_byte_offsets(smem_box, itemsize: int, swizzle: int) -> np.ndarray:
    """int64 array of shape ``(*smem_box, itemsize)``: the shared-memory offset of every byte of every
    element of the box (outermost first), relative to a destination aligned to :func:`swizzle_repeat`."""
    box = tuple(int(b) for b in smem_box)
    inner = box[-1] * int(itemsize)
    pitch = smem_row_pitch(inner, swizzle)
    rows = np.arange(math.prod(box[:-1]), dtype=np.int64)[:, None]
    cols = np.arange(inner, dtype=np.int64)[None, :]
    return swizzle_offset(rows * pitch + cols, swizzle).reshape(*box, int(itemsize))


def smem_image(tile: np.ndarray, swizzle: int, fill: int = 0, batch_dims: int = 0
               ) -> tuple[np.ndarray, np.ndarray]:
    """(image, written): the uint8 shared-memory image a TMA load of ``tile`` (a NumPy array shaped like
    the box in shared memory) leaves, with ``fill`` in bytes no element lands on, and the mask of the
    bytes the load writes. The first ``batch_dims`` dimensions of ``tile`` index separate boxes; the
    image then has those dimensions too, followed by the box's bytes."""
    tile = np.ascontiguousarray(tile)
    batch, box = tile.shape[:batch_dims], tile.shape[batch_dims:]
    offsets = smem_byte_offsets(box, tile.dtype.itemsize, swizzle).ravel()
    size = math.prod(box[:-1]) * smem_row_pitch(box[-1] * tile.dtype.itemsize, swizzle)
    image = np.full((*batch, size), fill, dtype=np.uint8)
    written = np.zeros(size, dtype=bool)
    image[..., offsets] = tile.view(np.uint8).reshape(*batch, -1)
    written[offsets] = True
    return image, written
