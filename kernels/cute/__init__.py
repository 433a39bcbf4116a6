"""Chapter 13's model of CuTe's layout algebra in plain Python, small enough to read in one sitting and exact
enough to test against the layouts the book's kernels use (tests/test_cute_model.py).

A :class:`Layout` is a shape and a stride of the same (nested) profile: a function from coordinates to
indices, ``index = sum(coord_i * stride_i)``. A one-dimensional coordinate ``i`` is first unpacked into the
shape's coordinates colexicographically (the leftmost mode varies fastest), as CuTe does. Here:

- :func:`make_layout` builds compact column-major (CuTe's ``LayoutLeft``) or row-major layouts;
- :func:`coalesce` merges modes that continue each other;
- :func:`composition` ``A o B``: the layout ``R`` with ``R(c) == A(B(c))``, derived mode by mode as CuTe derives
  it (each mode of ``B`` divides ``A``'s shape by its stride, then keeps its extent);
- :func:`complement` and :func:`logical_divide`: the tiles of a layout and the layout of the tiles;
- :class:`Swizzle` ``<B, M, S>``: the XOR of ``B`` bits taken ``S`` bits above bit ``M`` into bits ``M ..``, the
  functor behind every swizzled shared-memory layout (``Swizzle<3,4,3>`` on byte addresses is TMA's 128-byte
  swizzle; ``Swizzle<2,3,3>`` on bf16 offsets is hgemm's swizzle of 64-byte rows).

Only what the chapter needs is here: static integer shapes and strides, no dynamic modes, no products.
"""
from __future__ import annotations

import math
from typing import Union

Shape = Union[int, tuple]


# --- nested tuples ---------------------------------------------------------------------------------------

def flatten(t) -> tuple[int, ...]:
    """The leaves of a nested tuple, left to right (an int is a one-leaf tuple)."""
    if isinstance(t, int):
        return (t,)
    return tuple(x for s in t for x in flatten(s))


def congruent(a, b) -> bool:
    """Same nesting: both ints, or tuples of the same length with congruent members."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))


def product(t) -> int:
    return math.prod(flatten(t))


def idx2crd(i: int, shape) -> tuple[int, ...] | int:
    """The coordinate of index ``i`` in ``shape``, colexicographic (leftmost fastest), nested like the shape."""
    if isinstance(shape, int):
        return i % shape if shape else 0
    out = []
    for s in shape:
        n = product(s)
        out.append(idx2crd(i % n, s))
        i //= n
    return tuple(out)


def inner_product(coord, stride) -> int:
    if isinstance(stride, int):
        return int(coord) * stride
    return sum(inner_product(c, s) for c, s in zip(coord, stride))


def compact_strides(shape, major: str = "col", start: int = 1):
    """Strides of a compact layout of ``shape``: column-major (leftmost mode stride 1) or row-major."""
    leaves = flatten(shape)
    order = range(len(leaves)) if major == "col" else range(len(leaves) - 1, -1, -1)
    strides, acc = [0] * len(leaves), start
    for k in order:
        strides[k] = acc
        acc *= leaves[k]
    it = iter(strides)

    def rebuild(s):
        return next(it) if isinstance(s, int) else tuple(rebuild(x) for x in s)
    return rebuild(shape)


# --- layouts --------------------------------------------------------------------------------------------

class Layout:
    """``shape:stride``, a function from coordinates (or a 1-D index) to an index."""

    def __init__(self, shape: Shape, stride: Shape | None = None):
        if stride is None:
            stride = compact_strides(shape)
        if not congruent(shape, stride):
            raise ValueError(f"shape {shape} and stride {stride} must have the same nesting")
        if any(s < 1 for s in flatten(shape)):
            raise ValueError(f"shape {shape}: every extent must be positive")
        self.shape, self.stride = shape, stride

    def __call__(self, coord) -> int:
        """The index of a coordinate (nested like the shape) or of a 1-D index into the layout's domain."""
        if isinstance(coord, int):
            if not 0 <= coord < self.size():
                raise IndexError(f"index {coord} outside a layout of size {self.size()}")
            coord = idx2crd(coord, self.shape)
        return inner_product(coord, self.stride)

    def size(self) -> int:
        return product(self.shape)

    def cosize(self) -> int:
        """One past the largest index the layout produces."""
        return self(self.size() - 1) + 1 if self.size() else 0

    def modes(self) -> list[Layout]:
        """The top-level modes as layouts (a rank-0 int layout is its own only mode)."""
        if isinstance(self.shape, int):
            return [self]
        return [Layout(s, d) for s, d in zip(self.shape, self.stride)]

    def indices(self) -> list[int]:
        return [self(i) for i in range(self.size())]

    def __eq__(self, other) -> bool:
        return isinstance(other, Layout) and (self.shape, self.stride) == (other.shape, other.stride)

    def __repr__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"


def _fmt(t) -> str:
    return str(t) if isinstance(t, int) else "(" + ",".join(_fmt(x) for x in t) + ")"


def make_layout(shape: Shape, major: str = "col") -> Layout:
    """A compact layout: ``major="col"`` (CuTe's default, LayoutLeft) or ``"row"`` (LayoutRight)."""
    if major not in ("col", "row"):
        raise ValueError(f"major: expected 'col' or 'row', got {major!r}")
    return Layout(shape, compact_strides(shape, major))


def coalesce(layout: Layout) -> Layout:
    """The flattest layout with the same function: extent-1 modes dropped, a mode merged into the one before it
    when it continues it (stride = previous stride x previous extent)."""
    out: list[list[int]] = []
    for s, d in zip(flatten(layout.shape), flatten(layout.stride)):
        if s == 1:
            continue
        if out and out[-1][1] * out[-1][0] == d:
            out[-1][0] *= s
        else:
            out.append([s, d])
    if not out:
        return Layout(1, 0)
    if len(out) == 1:
        return Layout(out[0][0], out[0][1])
    return Layout(tuple(s for s, _ in out), tuple(d for _, d in out))


# --- composition, complement, divide ---------------------------------------------------------------------

def _compose_mode(a: Layout, s: int, d: int) -> tuple[list[int], list[int]]:
    """One mode ``s:d`` of B applied to A (flattened and coalesced): divide A's shape by ``d`` (skip ``d``
    elements), then keep ``s`` of what remains. CuTe's conditions: each division must be exact."""
    shape, stride = list(flatten(a.shape)), list(flatten(a.stride))
    out_s, out_d = [], []
    rest = d
    k = 0
    while k < len(shape) and rest > 1:            # strip `rest` elements off the front of A's modes
        if rest % shape[k] == 0:
            rest //= shape[k]
            k += 1
        elif shape[k] % rest == 0:
            stride[k] *= rest
            shape[k] //= rest
            rest = 1
        else:
            raise ValueError(f"composition: stride {d} does not divide the shape {a.shape} evenly")
    keep = s
    while keep > 1:
        if k >= len(shape):                       # past A's last mode: continue its last stride
            last_s = stride[-1] * shape[-1] if shape else 1
            out_s.append(keep)
            out_d.append(last_s * rest if k == len(shape) else last_s)
            keep = 1
            break
        if shape[k] >= keep:
            if shape[k] % keep and k < len(shape) - 1:
                raise ValueError(f"composition: extent {s} does not divide the shape {a.shape} evenly")
            out_s.append(keep)
            out_d.append(stride[k])
            keep = 1
        else:
            if keep % shape[k]:
                raise ValueError(f"composition: extent {s} does not divide the shape {a.shape} evenly")
            out_s.append(shape[k])
            out_d.append(stride[k])
            keep //= shape[k]
            k += 1
    return out_s, out_d


def composition(a: Layout, b: Layout | Shape) -> Layout:
    """``A o B``: a layout ``R`` of ``B``'s shape with ``R(i) == A(B(i))`` for every ``i`` in ``B``'s domain.
    ``b`` may be a shape (a compact column-major layout of it: the first ``size(b)`` elements of ``A``'s
    order, reshaped), or a tuple of layouts applied mode by mode (CuTe's tiler)."""
    if not isinstance(b, Layout):
        if isinstance(b, tuple) and any(isinstance(x, Layout) for x in b):
            if isinstance(a.shape, int) or len(b) > len(a.shape):
                raise ValueError(f"composition: a tiler of {len(b)} modes for a layout of rank {_rank(a)}")
            modes = a.modes()
            parts = [composition(modes[i], t) if isinstance(t, Layout) else composition(modes[i], make_layout(t))
                     for i, t in enumerate(b)] + modes[len(b):]
            return Layout(tuple(p.shape for p in parts), tuple(p.stride for p in parts))
        b = make_layout(b)
    ca = coalesce(a)
    if isinstance(b.shape, int):
        s, d = _compose_mode(ca, b.shape, b.stride)
        if not s:
            return Layout(1, 0)
        return Layout(s[0], d[0]) if len(s) == 1 else Layout(tuple(s), tuple(d))
    parts = [composition(a, m) for m in b.modes()]
    return Layout(tuple(p.shape for p in parts), tuple(p.stride for p in parts))


def _rank(layout: Layout) -> int:
    return 1 if isinstance(layout.shape, int) else len(layout.shape)


def complement(a: Layout, cosize: int) -> Layout:
    """The layout that fills the gaps of ``a`` up to ``cosize``: ``(a, complement)`` covers 0 .. cosize - 1
    once each (a must be injective with sorted, dividing strides, as CuTe requires)."""
    modes = sorted((d, s) for s, d in zip(flatten(a.shape), flatten(a.stride)) if s > 1)
    out_s, out_d, cur = [], [], 1
    for d, s in modes:
        if d % cur:
            raise ValueError(f"complement: stride {d} is not a multiple of {cur} in {a}")
        if d // cur > 1:
            out_s.append(d // cur)
            out_d.append(cur)
        cur = d * s
    if cosize % cur:
        raise ValueError(f"complement: {a} does not tile {cosize}")
    if cosize // cur > 1 or not out_s:
        out_s.append(max(cosize // cur, 1))
        out_d.append(cur)
    return coalesce(Layout(tuple(out_s), tuple(out_d)) if len(out_s) > 1 else Layout(out_s[0], out_d[0]))


def logical_divide(a: Layout, tiler: Layout) -> Layout:
    """``a`` split into tiles of ``tiler``: mode 0 indexes within a tile, mode 1 across tiles,
    ``composition(a, (tiler, complement(tiler, size(a))))``."""
    rest = complement(tiler, a.size())
    return composition(a, Layout((tiler.shape, rest.shape), (tiler.stride, rest.stride)))


# --- swizzles -----------------------------------------------------------------------------------------------

class Swizzle:
    """CuTe's ``Swizzle<B, M, S>``: bits ``M + S .. M + S + B - 1`` of an offset XOR-ed into bits ``M .. M + B - 1``.
    It keeps every aligned block of ``2**M`` elements whole and permutes the blocks within each span of
    ``2**(M + S + B)``."""

    def __init__(self, bits: int, base: int, shift: int):
        if bits < 0 or base < 0 or shift < bits:
            raise ValueError(f"Swizzle<{bits}, {base}, {shift}>: expected B >= 0, M >= 0 and S >= B")
        self.bits, self.base, self.shift = bits, base, shift
        self.zzz = ((1 << bits) - 1) << base               # the bits that change
        self.yyy = self.zzz << shift                       # the bits that choose how

    def __call__(self, offset: int) -> int:
        return offset ^ ((offset & self.yyy) >> self.shift)

    def __repr__(self) -> str:
        return f"Swizzle<{self.bits},{self.base},{self.shift}>"


def swizzled(swizzle: Swizzle, layout: Layout):
    """``swizzle o layout`` as a function of the coordinate (CuTe's ComposedLayout), with ``.indices()``."""
    class Composed:
        def __call__(self, coord):
            return swizzle(layout(coord))

        def indices(self):
            return [self(i) for i in range(layout.size())]

        def __repr__(self):
            return f"{swizzle} o {layout}"
    return Composed()


def tv_layout(thread: Layout, value: Layout) -> Layout:
    """A thread-value layout ``(thread, value) -> index``: CuTe's way of writing which lane holds which element
    of a fragment (mode 0 the thread, mode 1 the value within the thread)."""
    return Layout((thread.shape, value.shape), (thread.stride, value.stride))


def table(layout, rows: int, cols: int) -> list[list[int]]:
    """The index each (row, col) of a rows x cols grid maps to, for printing a 2-D layout as CuTe's print_layout."""
    return [[layout((r, c)) for c in range(cols)] for r in range(rows)]


__all__ = ["Layout", "Swizzle", "coalesce", "complement", "composition", "flatten", "idx2crd", "logical_divide",
           "make_layout", "swizzled", "table", "tv_layout"]

