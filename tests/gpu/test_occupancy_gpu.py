"""The occupancy formula against the driver, the device's facts, and clusters per device (H200).

Small probe kernels are compiled here from a source string (no kernels/ file): their register use
grows with the template argument N (an array of N floats kept live), their static shared memory with
S, and some carry __launch_bounds__. For a grid of (threads, dynamic smem) launches the formula must
give the driver's cuOccupancyMaxActiveBlocksPerMultiprocessor exactly.

Run with ``-s`` to see the clusters-per-device table; with ``$OUT`` set it is also written to
``$OUT/clusters_per_device.json``.
"""
import json
import os

import pytest

from utils.gpu import has_gpu, supports

pytestmark = pytest.mark.gpu

PROBES = r"""
template <int N, int S>
__device__ __forceinline__ void probe_body(float* out, float seed)
{
    float a[N];                                       // [N] floats loaded, all live until the end
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = out[i * blockDim.x + threadIdx.x];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
#pragma unroll
        for (int i = 0; i < N; ++i) a[i] = fmaf(a[i], a[N - 1 - i], seed);
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) s = fmaf(s, seed, a[i]);
    extern __shared__ float dyn[];
    if (S > 0) {
        __shared__ float stat[S > 0 ? S : 1];         // [S] floats of static shared memory
        stat[threadIdx.x % S] = s;
        __syncthreads();
        s += stat[(threadIdx.x + 1) % S];
    }
    dyn[0] = s;
    out[blockIdx.x * blockDim.x + threadIdx.x] = s + dyn[1];
}

template <int N, int S>
__global__ void probe(float* out, float seed) { probe_body<N, S>(out, seed); }

template <int N, int S, int MAX_THREADS, int MIN_BLOCKS>
__global__ void __launch_bounds__(MAX_THREADS, MIN_BLOCKS) probe_bounded(float* out, float seed)
{
    probe_body<N, S>(out, seed);
}

#define CLUSTER_PROBE(C) \
extern "C" __global__ void __cluster_dims__(C, 1, 1) cluster_probe_##C(float* out) \
{ \
    extern __shared__ float dyn[]; \
    dyn[threadIdx.x % 4] = threadIdx.x; \
    out[blockIdx.x * blockDim.x + threadIdx.x] = dyn[(threadIdx.x + 1) % 4]; \
}
CLUSTER_PROBE(1)
CLUSTER_PROBE(2)
CLUSTER_PROBE(4)
CLUSTER_PROBE(8)
CLUSTER_PROBE(16)
"""

# name expression -> the largest block it may be launched with (its __launch_bounds__, else 1024)
# (registers per thread from NVRTC 13.0 for sm_90, for orientation: 12, 32, 40, 48, 72, 128, 168, 254; the
# bounded ones 128, 64, 32; the test reads the loaded kernels' own counts)
KERNELS = {
    "probe<1, 0>": 1024,
    "probe<16, 0>": 1024,
    "probe<28, 0>": 1024,
    "probe<40, 1024>": 1024,
    "probe<64, 0>": 1024,
    "probe<100, 4096>": 1024,
    "probe<160, 0>": 1024,
    "probe<200, 0>": 1024,
    "probe_bounded<200, 0, 256, 2>": 256,
    "probe_bounded<64, 10240, 1024, 1>": 1024,
    "probe_bounded<32, 0, 128, 16>": 128,
}
THREADS = [32, 64, 96, 128, 160, 192, 256, 384, 512, 640, 768, 800, 896, 1024]
KIB = 1024
DYNAMIC = [0, 1, 1000, 8 * KIB, 48 * KIB, 100 * KIB, 113 * KIB, 113 * KIB + 1, 150 * KIB, 200 * KIB]
CLUSTERS = [1, 2, 4, 8, 16]
CLUSTER_LAUNCHES = [(128, 0), (256, 0), (1024, 0), (128, 100 * KIB), (256, 200 * KIB)]


@pytest.fixture(scope="module")
def module():
    import cupy
    return cupy.RawModule(code=PROBES, options=("-std=c++17",), name_expressions=list(KERNELS))


@pytest.fixture(scope="module")
def device():
    from utils.hardware import facts
    return facts()


def driver_blocks(fn, threads, smem):
    """The driver's answer, or None where it refuses the question."""
    import cupy
    try:
        return int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, smem))
    except cupy.cuda.driver.CUDADriverError:
        return None


@pytest.mark.parametrize("name", list(KERNELS))
def test_formula_matches_the_driver(module, device, name):
    from utils.occupancy import from_function
    fn = module.get_function(name)
    room = device.smem_per_block_optin - fn.shared_size_bytes     # the most dynamic smem a block may have
    fn.max_dynamic_shared_size_bytes = room                        # opted in, as launches do
    misses, asked = [], 0
    for threads in (t for t in THREADS if t <= KERNELS[name]):
        for smem in DYNAMIC:
            smem = min(smem, room + 1)                                 # one byte over: must give 0
            occ = from_function(fn, threads, smem, facts=device)
            want = driver_blocks(fn, threads, smem)
            asked += 1
            if (0 if want is None else want) != occ.blocks:
                misses.append(f"threads={threads} smem={smem}: driver {want}, formula {occ.blocks} "
                              f"({occ.limiter}; by threads {occ.by_threads}, registers {occ.by_registers}, "
                              f"smem {occ.by_smem})")
    assert not misses, (f"{name} ({fn.num_regs} registers, {fn.shared_size_bytes} B static smem): "
                        f"{len(misses)} of {asked} launches differ:\n" + "\n".join(misses[:25]))


def test_probes_span_the_register_range(module):
    regs = {name: module.get_function(name).num_regs for name in KERNELS}
    print("registers per probe:", regs)
    assert min(regs.values()) <= 16 and max(regs.values()) >= 200, regs


def test_device_facts_match_the_documented_part(device):
    from utils.hardware import PARTS, facts
    assert device.on_device and set(device) == set(facts(part="H200"))
    assert all(device[n].source.startswith(("device: ", "architecture: ")) for n in device), device.table()
    part = next((p for p in PARTS if p in device.name.upper()), None)
    if part is None:
        pytest.skip(f"{device.name}: no documented part to compare with")
    doc = facts(part=part)
    same = ["cc", "sms", "l2_bytes", "smem_per_sm", "smem_per_block_optin", "reserved_smem_per_block",
            "regs_per_sm", "regs_per_block", "max_threads_per_sm", "max_threads_per_block",
            "max_blocks_per_sm", "warp_size"]
    differ = {n: (device[n].value, doc[n].value) for n in same if device[n].value != doc[n].value}
    print(f"{device.name}: sm_clock_khz {device.sm_clock_khz}, mem_bus_bits {device.mem_bus_bits}, "
          f"hbm_bytes {device.hbm_bytes:,} (documented {doc.hbm_bytes:,})")
    assert not differ, f"device vs documented {part}: {differ}"


@pytest.mark.skipif(has_gpu() and not supports("clusters"), reason="needs thread block clusters (sm_90)")
def test_clusters_per_device(module, device):
    """Measure first (table printed, JSON written), then judge: a failed check still leaves the numbers."""
    from utils.occupancy import blocks_per_sm, clusters_per_device
    rows, problems = [], []
    for threads, smem in CLUSTER_LAUNCHES:
        row = {"threads": threads, "dynamic_smem": smem}
        for c in CLUSTERS:
            fn = module.get_function(f"cluster_probe_{c}")
            n = clusters_per_device(fn, threads, smem, c)
            per_sm = blocks_per_sm(threads, fn.num_regs, fn.shared_size_bytes, smem, facts=device).blocks
            row[c], row[f"per_sm_{c}"] = n, per_sm
            if n is None:
                if c <= 8:                         # a portable size must fit somewhere on any sm_90 part
                    problems.append(f"cluster {c}, {threads} threads, {smem} B: the driver gave no answer")
            elif n * c > device.sms * per_sm:
                problems.append(f"cluster {c}, {threads} threads, {smem} B: {n} clusters exceed "
                                f"{device.sms} SMs x {per_sm} blocks")
            # No lower bound: on the H200 (2026-12-01) the driver gave 1056 clusters of 1 at 128 threads,
            # 8 per SM where the block formula allows 16, so a cluster launch is not a plain launch.
        rows.append(row)
    head = ("threads  dyn smem  blocks/SM  " + "  ".join(f"cl={c:<4}" for c in CLUSTERS)
            + "  (max active clusters per device; blocks resident)")
    print(f"\n{device.name}, {device.sms} SMs\n{head}")
    for r in rows:
        cells = "  ".join(f"{r[c] if r[c] is not None else '-':<7}" for c in CLUSTERS)
        resident = ", ".join(str(r[c] * c) if r[c] is not None else "-" for c in CLUSTERS)
        print(f"{r['threads']:>7}  {r['dynamic_smem']:>8}  {r['per_sm_1']:>9}  {cells}  {resident}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "clusters_per_device.json"), "w") as fh:
            json.dump({"device": device.name, "sms": device.sms, "rows": rows}, fh, indent=1)
    assert not problems, "\n".join(problems)
