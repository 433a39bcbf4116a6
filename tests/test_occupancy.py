"""The occupancy formula on hand-worked cases (H200 and A100 figures, no GPU needed).

Each expected number below is worked out by hand from the rules in utils/occupancy.py's docstring;
tests/gpu/test_occupancy_gpu.py checks the same formula against the driver on a grid of launches.
"""
import numpy as np
import pytest

from utils.gpu import has_gpu
from utils.hardware import Fact, Facts, facts
from utils.occupancy import blocks_per_sm, clusters_per_device, from_function, waves

H200 = facts(part="H200")
A100 = facts(part="A100")
KIB = 1024


def test_256_threads_of_64_registers_hold_4_blocks_by_registers():
    # a warp takes 64 x 32 = 2048 registers; a partition's 16384 hold 8 warps, 4 partitions 32 warps:
    # 4 blocks of 8 warps, half the 64 warp slots
    occ = blocks_per_sm(256, 64, 0, 0, facts=H200)
    assert (occ.blocks, occ.limiter, occ.by_registers, occ.by_threads) == (4, "registers", 4, 8)
    assert (occ.warps, occ.occupancy_fraction, occ.registers_per_warp) == (32, 0.5, 2048)


def test_1024_threads_of_32_registers_hold_2_blocks_by_threads():
    # 32 warps per block, 64 slots: 2 blocks; the registers (1024 per warp) would allow 2 as well, and a
    # tie is reported as the thread limit first, as cuda_occupancy.h lists its factors
    occ = blocks_per_sm(1024, 32, 0, 0, facts=H200)
    assert (occ.blocks, occ.limiter, occ.by_threads, occ.by_registers) == (2, "threads", 2, 2)
    assert occ.occupancy_fraction == 1.0


def test_registers_are_rounded_up_to_a_multiple_of_8_per_thread():
    # 33 registers are allocated as 40: 1280 per warp, 12 warps per partition, 48 per SM -> 12 blocks of 4
    assert blocks_per_sm(128, 33, facts=H200).registers_per_warp == 40 * 32
    assert blocks_per_sm(128, 33, facts=H200).blocks == 12
    assert blocks_per_sm(128, 32, facts=H200).blocks == 16


def test_registers_are_handed_out_per_partition():
    # 96 threads x 40 registers: 65536 // (96 * 40) = 17 blocks if the file were one pool; per partition
    # 16384 // 1280 = 12 warps, 48 per SM, 16 blocks of 3 warps
    occ = blocks_per_sm(96, 40, facts=H200)
    assert (occ.blocks, occ.limiter) == (16, "registers")


@pytest.mark.parametrize("threads,regs,blocks", [
    (1024, 64, 1),      # 32 warps x 2048 = 65536: exactly the 64K a block may have
    (1024, 72, 0),      # 32 warps x 2304 > 65536: does not launch
    (800, 80, 0),       # 25 warps x 2560 = 64000 fits, but 25 rounded up to 28 warps x 2560 > 65536
    (768, 80, 1),       # 24 warps (a multiple of 4) x 2560 = 61440: one block
])
def test_a_block_over_the_per_block_register_limit_does_not_launch(threads, regs, blocks):
    occ = blocks_per_sm(threads, regs, facts=H200)
    assert occ.blocks == blocks, occ
    if blocks == 0:
        assert (occ.limiter, occ.by_registers, occ.warps, occ.occupancy_fraction) == ("registers", 0, 0, 0.0)


@pytest.mark.parametrize("dynamic,blocks", [
    (100 * KIB, 2),               # 100 + 1 reserved = 101 KiB per block; 228 // 101 = 2
    (113 * KIB, 2),               # 113 + 1 = 114 KiB: exactly two fit in 228
    (113 * KIB + 1, 1),           # one byte more rounds up to 114 KiB + 128: one
    (227 * KIB, 1),               # the opt-in maximum: one block
    (227 * KIB + 1, 0),           # over the opt-in maximum: does not launch
])
def test_shared_memory_limit(dynamic, blocks):
    occ = blocks_per_sm(128, 32, 0, dynamic, facts=H200)
    assert (occ.blocks, occ.limiter, occ.by_smem) == (blocks, "smem", blocks), occ


def test_the_reserved_kib_alone_allows_228_blocks_and_the_block_cap_says_32():
    occ = blocks_per_sm(32, 16, 0, 0, facts=H200)
    assert (occ.blocks, occ.limiter, occ.by_smem, occ.by_blocks) == (32, "blocks", 228, 32)


def test_static_and_dynamic_smem_add_with_the_reserved_kib_and_round_to_128_bytes():
    assert blocks_per_sm(128, 32, 1, 0, facts=H200).smem_per_block == KIB + 128
    assert blocks_per_sm(128, 32, 4096, 100, facts=H200).smem_per_block == 4096 + KIB + 128
    assert blocks_per_sm(128, 32, 60 * KIB, 53 * KIB, facts=H200).blocks == 2      # 114 KiB as above
    assert blocks_per_sm(128, 32, 60 * KIB, 53 * KIB + 1, facts=H200).blocks == 1


def test_the_a100_has_less_shared_memory_per_sm():
    # 164 KiB per SM: one block of 101 KiB (two on the H200), and 163 KiB is its opt-in maximum
    assert blocks_per_sm(128, 32, 0, 100 * KIB, facts=A100).blocks == 1
    assert blocks_per_sm(128, 32, 0, 163 * KIB, facts=A100).blocks == 1
    assert blocks_per_sm(128, 32, 0, 163 * KIB + 1, facts=A100).blocks == 0
    assert blocks_per_sm(128, 32, 0, 50 * KIB, facts=A100).blocks == 3         # 164 // 51


def test_zero_registers_leave_the_other_limits():
    occ = blocks_per_sm(32, 0, facts=H200)
    assert (occ.blocks, occ.limiter, occ.by_registers, occ.registers_per_warp) == (32, "blocks", None, 0)
    assert blocks_per_sm(1024, 0, facts=H200).blocks == 2


def test_partial_warps_take_a_whole_warp_slot():
    assert blocks_per_sm(33, 16, facts=H200).by_threads == 32       # 2 warps each: 64 // 2
    assert blocks_per_sm(1000, 16, facts=H200).by_threads == 2


@pytest.mark.parametrize("kwargs,msg", [
    (dict(threads=0, registers_per_thread=32), r"threads: expected an integer in \[1, 1024\], got 0"),
    (dict(threads=1025, registers_per_thread=32), r"threads: .*got 1025"),
    (dict(threads=128.0, registers_per_thread=32), "threads: expected an integer, got 128.0"),
    (dict(threads=True, registers_per_thread=32), "threads: expected an integer, got True"),
    (dict(threads=128, registers_per_thread=256), r"registers_per_thread: expected an integer in \[0, 255\]"),
    (dict(threads=128, registers_per_thread=-1), "registers_per_thread: .*got -1"),
    (dict(threads=128, registers_per_thread=32, smem_static=-4), "smem_static: expected an integer >= 0"),
    (dict(threads=128, registers_per_thread=32, smem_dynamic="1k"), "smem_dynamic: expected an integer"),
])
def test_bad_input_raises_saying_what_was_expected(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        blocks_per_sm(**kwargs, facts=H200)


def test_numpy_integers_are_accepted():
    assert blocks_per_sm(np.int64(256), np.int32(64), np.int64(0), np.uint32(0), facts=H200).blocks == 4


class LoadedKernel:
    """The two attributes a cupy.RawKernel answers that the formula needs."""
    num_regs, shared_size_bytes = 64, 4096


def test_from_function_reads_a_loaded_kernel_or_a_ptxas_entry():
    by_hand = blocks_per_sm(256, 64, 4096, 100 * KIB, facts=H200)
    assert from_function(LoadedKernel(), 256, 100 * KIB, facts=H200) == by_hand
    entry = {"registers": 64, "smem_bytes": 4096, "stack_bytes": 0, "spill_stores": 0, "spill_loads": 0}
    assert from_function(entry, 256, 100 * KIB, facts=H200) == by_hand
    assert by_hand.blocks == 2                      # 4 + 100 + 1 KiB per block: smem, not registers


@pytest.mark.parametrize("bad,msg", [
    ({"k_a": {"registers": 10, "smem_bytes": 0}}, "index the report by the kernel"),
    (object(), "expected a loaded kernel"),
])
def test_from_function_rejects_what_it_cannot_read(bad, msg):
    with pytest.raises(ValueError, match=msg):
        from_function(bad, 128, facts=H200)


def test_default_facts_on_a_cpu_are_the_h200s():
    if has_gpu():
        pytest.skip("a GPU is present: the default facts are the device's")
    assert blocks_per_sm(128, 32, 0, 100 * KIB) == blocks_per_sm(128, 32, 0, 100 * KIB, facts=H200)


def test_clusters_per_device_is_none_without_a_gpu_and_checks_its_input():
    with pytest.raises(ValueError, match="cluster: expected an integer >= 1, got 0"):
        clusters_per_device(object(), 128, 0, cluster=0)
    if has_gpu():
        pytest.skip("a GPU is present: tests/gpu/test_occupancy_gpu.py asks the driver")
    assert clusters_per_device(object(), 128, 0, cluster=2) is None


def test_waves():
    occ = blocks_per_sm(256, 64, facts=H200)                  # 4 blocks per SM
    assert waves(132 * 4 * 3, occ, sms=132) == 3.0
    with pytest.raises(ValueError, match="at least one block per SM"):
        waves(10, blocks_per_sm(1024, 72, facts=H200), sms=132)


def test_a_block_over_the_per_block_smem_limit_does_not_launch_even_if_the_sm_has_room():
    # A kernel that has not opted in may use 48 KiB: plan with that limit and a 60 KiB block gets 0,
    # though the SM's 228 KiB would hold three.
    no_opt_in = Facts("H200, no opt-in", False,
                      {**H200, "smem_per_block_optin": Fact(48 * KIB, "bytes", "test: the default limit")})
    assert blocks_per_sm(128, 32, 0, 48 * KIB, facts=no_opt_in).blocks == 4
    assert blocks_per_sm(128, 32, 0, 60 * KIB, facts=no_opt_in).blocks == 0
    assert blocks_per_sm(128, 32, 0, 60 * KIB, facts=H200).blocks == 3


def test_the_launch_check_rounds_a_blocks_warps_up_to_the_4_partitions():
    # With 64K registers per block and per SM, the partition rule already implies the launch check; a
    # part with half as many per block shows it: 25 warps x 1280 = 32000 fit in 32K, but the check counts
    # 28 warps (35840), so the block does not launch although the SM's 48 warps of 40 registers would hold it.
    half = Facts("H200, 32K registers per block", False,
                 {**H200, "regs_per_block": Fact(32768, "32-bit registers", "test: a smaller block limit")})
    assert blocks_per_sm(800, 40, facts=H200).blocks == 1
    assert blocks_per_sm(800, 40, facts=half).blocks == 0
    assert blocks_per_sm(768, 40, facts=half).blocks == 2        # 24 warps x 1280 = 30720: fits
    assert blocks_per_sm(1024, 40, facts=half).blocks == 0       # 32 x 1280 = 40960 > 32768
