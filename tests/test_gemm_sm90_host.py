"""kernels/gemm_sm90 (chapter 13, hgemm v9) without a GPU: v9's plan is v8's launch with v9's kernel, and v8's
fallbacks where TMA cannot write C or read A and B."""
from kernels import gemm_sm90 as G
from kernels import hgemm as H
from tests.test_hgemm_host import arrays


def test_v9_launches_what_v8_launches_with_its_own_kernel():
    v8, v9 = H.HGEMM["v8_tma_store"], G.COLLECTIVE["v9_collective"]
    for shape in [(4096, 4096, 4096), (300, 264, 72), (1, 8, 8)]:
        (l8,) = v8.launches(v8.validate(*arrays(*shape)))
        (l9,) = v9.launches(v9.validate(*arrays(*shape)))
        assert l9.kernel == G.v9_name(G.V9_CONFIG) and l9.source is G.V9_SOURCE
        assert (l9.grid, l9.block, l9.smem, l9.cluster, l9.persistent) == (l8.grid, l8.block, l8.smem, l8.cluster, l8.persistent)
        assert [getattr(a, "shape", a) for a in l9.args] == [getattr(a, "shape", a) for a in l8.args]


def test_v9_keeps_v8s_fallbacks():
    v9 = G.COLLECTIVE["v9_collective"]
    (ln,) = v9.launches(v9.validate(*arrays(64, 64, 64, offs=(0, 0, 8))))     # C not 128-byte aligned: v7
    assert ln.kernel == H.v7_name(H.V7_CONFIG) and ln.source is H.V7_SOURCE
    assert H.is_fallback(v9.launches(v9.validate(*arrays(4095, 4097, 4095))))   # A, B not TMA-readable


def test_v9_source_finds_chapter_12s_header():
    from utils.build import local_includes
    names = {p.name for p in local_includes(G.V9_SOURCE.path, G.V9_SOURCE.include_dirs)}
    assert {"pipeline.cuh", "mainloop.cuh", "epilogue.cuh", "scheduler.cuh", "hopper_common.cuh"} <= names
