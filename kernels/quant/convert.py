"""The INT4 -> bf16/fp16 conversion benchmark (chapter 9.4): op ``int4_convert``, versions v0-v3.

Each version converts 8 nibbles per int32 word; a launch stores the first conversion of every word (checked)
and then runs ``reps`` more rounds whose results only feed a sink, so its time measures the conversion
rate. Each version reads its words in the packing order it was written for (``ORDER``); ``prepare`` packs
canonical codes (uint8 in [0, 15]) that way.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from utils.arrays import bf16, ceil_div
from utils.build import KernelSource
from utils.ops import expect_array, expect_same_device
from utils.version import Launch, Registry, Version

from .formats import AWQ_ORDER, CONVERT_REPS, SEQ_ORDER, THREADS, pack_nibbles

CONVERT_V0_SOURCE = KernelSource("quant/convert_v0_naive.cu")
CONVERT_V1_SOURCE = KernelSource("quant/convert_v1_magic.cu")
CONVERT_V2_SOURCE = KernelSource("quant/convert_v2_magic_interleaved.cu")
CONVERT_V3_SOURCE = KernelSource("quant/convert_v3_magic_fp16.cu")

# Which packing order each version expects its input words in, and what it writes.
ORDER = {"v0_naive": SEQ_ORDER, "v1_magic": SEQ_ORDER, "v2_magic_interleaved": AWQ_ORDER, "v3_magic_fp16": AWQ_ORDER}
OUTPUT = {"v0_naive": "bfloat16", "v1_magic": "bfloat16", "v2_magic_interleaved": "bfloat16",
          "v3_magic_fp16": "float16"}


@dataclasses.dataclass(frozen=True)
class ConvertProblem:
    words: int          # int32 words of packed nibbles (4 per thread)
    reps: int           # timed rounds after the stored one
    packed: object
    out: object
    sink: object

    @property
    def threads(self) -> int:
        return self.words // 4


def convert_problem(packed, out, sink, *, reps: int = CONVERT_REPS) -> ConvertProblem:
    """Validate (packed int32 [words], out bf16 or fp16 [8 words], sink uint32 [1], reps)."""
    expect_array(packed, "packed", dtype=(np.int32, np.uint32), ndim=1)
    words = int(packed.shape[0])
    if words < 4 or words % 4:
        raise ValueError(f"packed: expected a positive multiple of 4 words (16 bytes per thread), got {words}")
    if words // 4 > 2**31 - 1:
        raise ValueError(f"packed: {words} words exceed the int32 thread count")
    expect_array(out, "out", dtype=(bf16(), np.float16), shape=(words * 8,))
    expect_array(sink, "sink", dtype=np.uint32, shape=(1,), align=4)
    if not 0 <= int(reps) < 2**31:
        raise ValueError(f"reps: expected a non-negative int32, got {reps}")
    expect_same_device(packed, out, sink)
    return ConvertProblem(words, int(reps), packed, out, sink)


def plan_convert(kernel: str, output: str):
    """The plan of one conversion version: one thread per 4 words; ``out`` must be of ``output`` dtype."""
    def plan(p: ConvertProblem, config=None):
        if np.dtype(p.out.dtype).name != output:
            raise ValueError(f"{kernel}: out must be {output}, got {np.dtype(p.out.dtype).name}")
        return [Launch(kernel, (ceil_div(p.threads, THREADS), 1, 1), (THREADS, 1, 1),
                       (p.packed, p.out, p.sink, np.int32(p.threads), np.int32(p.reps)))]
    return plan


def prepare_for(label: str):
    """Canonical codes (uint8 [n], n % 32 == 0) -> the int32 words version ``label`` reads."""
    def prepare(values):
        return (pack_nibbles(values, 0, ORDER[label]),)
    return prepare


def convert_version(number: int, idea: str, summary: str, source, parent: str | None) -> Version:
    label = f"v{number}_{idea}"
    return Version(f"int4_convert_{label}", summary, source, plan_convert(f"int4_convert_{label}", OUTPUT[label]),
                   parent=parent, snippet=f"int4_convert_v{number}", prepare=prepare_for(label))


CONVERT = Registry("int4_convert", convert_problem, [
    convert_version(0, "naive", "shift, mask and integer-to-bf16 conversion per nibble (sequential order)",
                    CONVERT_V0_SOURCE, None),
    convert_version(1, "magic", "lop3 into the mantissa of 128.0 for two nibbles at once, subtract, prmt back to order",
                    CONVERT_V1_SOURCE, "v0_naive"),
    convert_version(2, "magic_interleaved", "v1 on AWQ's interleaved order: pairs come out in order, no prmt",
                    CONVERT_V2_SOURCE, "v1_magic"),
    convert_version(3, "magic_fp16", "fp16 output, magic 1024.0: one shift per 8 nibbles, the odd nibble scaled by 1/16",
                    CONVERT_V3_SOURCE, "v2_magic_interleaved"),
])
