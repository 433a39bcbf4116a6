"""Every SGEMM version's kernels, run on the CPU: tests/emu/cuda_emu.h turns the .cu files into C++ (one OS
thread per CUDA thread, real barriers), and a generated driver launches each instance with the grid and
block its version's plan gives, on tails, both 16-byte and 4-byte paths, beta 0 with C poisoned and beta != 0,
against a float64 reference, with a poisoned guard past the end of C. It checks the plans and the kernels'
index arithmetic together where no GPU is at hand; tests/gpu/test_sgemm.py is the real thing. Skipped
without g++ (C++20)."""
import numpy as np

from kernels import sgemm as G
from tests.build_helpers import emu_launch_code, run_emulated_driver
from tests.fakes import FakeDeviceArray
from utils.paths import KERNELS

# (M, N, K), offsets of A, B, C in floats past a 16-byte boundary, beta
CASES = [((1, 1, 1), (0, 0, 0), 0.0), ((33, 65, 7), (0, 0, 0), 0.75), ((37, 199, 183), (0, 0, 0), 0.0),
         ((129, 260, 36), (0, 0, 0), 0.0), ((129, 260, 36), (1, 2, 3), 0.75), ((200, 136, 36), (0, 0, 0), 0.75),
         # N % 4 == 1 with whole K slices: v9's iterator tests each column of a 4-wide group of B on its own
         ((70, 133, 48), (0, 0, 0), 0.0),
         # tiles that divide the shape: v9's loads without tests (iterator.cuh) for the BK = 8 configs
         ((128, 256, 40), (0, 0, 0), 0.75)]

DRIVER_HEAD = r"""
#include "cuda_emu.h"
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>
%(includes)s

static int runs = 0, fails = 0;

template <class Launch>
void check(const char* what, int M, int N, int K, float alpha, float beta, int oa, int ob, int oc, Launch launch) {
    std::mt19937 g(M * 7919 + N * 31 + K + oa + 2 * ob + 3 * oc);
    std::normal_distribution<float> d;
    // NaN past the ends of A and B (a whole row and more): a kernel that reads a row or column it should not
    // multiplies a NaN into C even where the other operand is a zero-filled tail
    std::vector<float> A(M * K + K + 16, NAN), B(K * N + N + 16, NAN), Cb(M * N + 8 + 32);
    auto at = [](std::vector<float>& v, int off) { return (float*)(((uintptr_t)v.data() + 15) & ~(uintptr_t)15) + off; };
    float *a = at(A, oa), *b = at(B, ob), *c = at(Cb, oc);
    for (int i = 0; i < M * K; ++i) a[i] = d(g);
    for (int i = 0; i < K * N; ++i) b[i] = d(g);
    std::vector<float> c0(M * N);
    for (auto& x : c0) x = beta == 0.f ? NAN : d(g);
    for (int i = 0; i < M * N; ++i) c[i] = c0[i];
    for (int i = M * N; i < M * N + 8; ++i) c[i] = NAN;
    launch(a, b, c);
    double num = 0, den = 0;
    int bad = 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double r = 0;
            for (int k = 0; k < K; ++k) r += (double)a[i * K + k] * b[k * N + j];
            r = alpha * r + (beta == 0.f ? 0.0 : beta * (double)c0[i * N + j]);
            if (!std::isfinite(c[i * N + j])) ++bad;
            num += (c[i * N + j] - r) * (c[i * N + j] - r);
            den += r * r;
        }
    for (int i = M * N; i < M * N + 8; ++i) bad += !std::isnan(c[i]);
    ++runs;
    const double rel = std::sqrt(num / (den + 1e-30));
    if (bad || rel > 1e-5) {
        ++fails;
        std::printf("FAIL %%s: relative L2 error %%g, %%d elements unwritten or written past C\n", what, rel, bad);
    }
}

int main() {
"""

DRIVER_TAIL = r"""
    std::printf("%d runs, %d failures\n", runs, fails);
    return fails != 0;
}
"""


def problem_at(shape, offs):
    M, N, K = shape
    bases = (1 << 36, 2 << 36, 3 << 36)
    a, b, c = (FakeDeviceArray(s, np.float32, ptr=base + 4 * o)
               for s, base, o in zip(((M, K), (K, N), (M, N)), bases, offs))
    return a, b, c


def checks() -> tuple[list[str], list[str]]:
    """(kernel files, check() lines): one check per version, config and case, launched as the version's plan says."""
    lines, files = [], []
    for v in G.SGEMM.values():
        files.append(v.source.file)
        for config in (v.all_configs() or (None,)):
            for shape, offs, beta in CASES:
                alpha = 1.0 if beta == 0 else -1.5
                p = v.validate(*problem_at(shape, offs), alpha=alpha, beta=beta)
                (ln,) = v.launches(p, config)
                what = f"{v.label} {ln.kernel} {'x'.join(map(str, shape))} offsets {offs} beta {beta}"
                M, N, K = shape
                launch = emu_launch_code(ln, f"{M}, {N}, {K}, {alpha}f, a, b, {beta}f, c")
                lines.append(f'    check("{what}", {M}, {N}, {K}, {alpha}f, {beta}f, {offs[0]}, {offs[1]}, {offs[2]}, '
                             f'[&](float* a, float* b, float* c) {{ {launch}; }});')
    return files, lines


def test_every_version_on_the_cpu(tmp_path):
    files, lines = checks()
    run_emulated_driver(tmp_path, DRIVER_HEAD, lines, DRIVER_TAIL, files, [KERNELS / "sgemm"])
