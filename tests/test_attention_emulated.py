"""The FlashAttention forward versions (kernels/attention, chapter 15) run on the CPU through tests/emu (one OS
thread per CUDA thread, real block barriers): a generated driver launches each version as its plan says on odd
lengths, GQA, Sq != Sk with bottom-right causal rows that see no key, with out and lse NaN-poisoned, against a
float64 reference of the bf16 inputs computed in the driver. tests/gpu/test_attention.py is the real thing.
Skipped without g++ (C++20)."""
from pathlib import Path

import numpy as np

from kernels import attention as A
from tests.build_helpers import emu_launch_code, emulated_source, run_emulated_driver
from tests.fakes import FakeDeviceArray
from utils.arrays import bf16
from utils.paths import KERNELS

# (B, Hq, Hkv, Sq, Sk, D, causal)
CASES = [(1, 1, 1, 1, 1, 64, False), (1, 2, 1, 17, 17, 64, True), (2, 2, 2, 70, 33, 64, True),
         (1, 1, 1, 5, 100, 128, True), (1, 4, 2, 40, 40, 128, False), (1, 1, 1, 65, 65, 64, True),
         (1, 1, 1, 3, 300, 64, False)]                   # five key tiles of v1: the rescale by alpha matters

DRIVER_HEAD = r"""
#include "cuda_emu.h"
#include "cuda_bf16.h"
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
%(includes)s

static int runs = 0, fails = 0;

template <class Launch>
void check(const char* what, int B, int Hq, int Hkv, int Sq, int Sk, int D, bool causal, float scale, Launch launch) {
    std::mt19937 g(B * 7919 + Hq * 131 + Sq * 31 + Sk * 7 + D + causal);
    std::normal_distribution<float> nd;
    auto draw = [&](size_t n) { std::vector<__nv_bfloat16> x(n); for (auto& e : x) e = __float2bfloat16(nd(g)); return x; };
    auto q = draw((size_t)B * Hq * Sq * D), k = draw((size_t)B * Hkv * Sk * D), v = draw((size_t)B * Hkv * Sk * D);
    std::vector<__nv_bfloat16> out((size_t)B * Hq * Sq * D + 8, __float2bfloat16(NAN));
    std::vector<float> lse((size_t)B * Hq * Sq + 8, NAN);
    launch(q.data(), k.data(), v.data(), out.data(), lse.data());
    int bad = 0;
    double num = 0, den = 0, lse_err = 0;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < Hq; ++h) {
            const int gk = h / (Hq / Hkv);
            for (int i = 0; i < Sq; ++i) {
                const int seen = causal ? std::max(0, std::min(Sk, i + Sk - Sq + 1)) : Sk;
                const size_t row = ((size_t)b * Hq + h) * Sq + i;
                std::vector<double> s(seen);
                double m = -INFINITY;
                for (int j = 0; j < seen; ++j) {
                    double acc = 0;
                    for (int d = 0; d < D; ++d)
                        acc += (double)__bfloat162float(q[row * D + d]) *
                               __bfloat162float(k[(((size_t)b * Hkv + gk) * Sk + j) * D + d]);
                    s[j] = scale * acc;
                    m = std::max(m, s[j]);
                }
                double l = 0;
                for (int j = 0; j < seen; ++j) l += std::exp(s[j] - m);
                for (int d = 0; d < D; ++d) {
                    double r = 0;
                    for (int j = 0; j < seen; ++j)
                        r += std::exp(s[j] - m) * __bfloat162float(v[(((size_t)b * Hkv + gk) * Sk + j) * D + d]);
                    r = seen ? r / l : 0.0;
                    const float got = __bfloat162float(out[row * D + d]);
                    if (!std::isfinite(got)) ++bad;
                    num += (got - r) * (got - r);
                    den += r * r;
                }
                const double want = seen ? m + std::log(l) : -INFINITY;
                if (seen ? !(std::fabs(lse[row] - want) <= 1e-4 * (1 + std::fabs(want))) : !(std::isinf(lse[row]) && lse[row] < 0))
                    ++bad, lse_err = std::max(lse_err, (double)std::fabs(lse[row] - want));
            }
        }
    for (size_t e = (size_t)B * Hq * Sq * D; e < out.size(); ++e) bad += !std::isnan(__bfloat162float(out[e]));
    for (size_t e = (size_t)B * Hq * Sq; e < lse.size(); ++e) bad += !std::isnan(lse[e]);
    ++runs;
    const double rel = std::sqrt(num / (den + 1e-30));
    if (bad || rel > 8e-3) {                           // bf16 output: about 2^-8 relative
        ++fails;
        std::printf("FAIL %%s: relative L2 error of out %%g, %%d bad elements (worst lse error %%g)\n", what, rel, bad, lse_err);
    }
}

int main() {
"""

DRIVER_TAIL = r"""
    std::printf("%d runs, %d failures\n", runs, fails);
    return fails != 0;
}
"""


def fake(B, Hq, Hkv, Sq, Sk, D):
    shapes = [((B, Hq, Sq, D), bf16()), ((B, Hkv, Sk, D), bf16()), ((B, Hkv, Sk, D), bf16()),
              ((B, Hq, Sq, D), bf16()), ((B, Hq, Sq), np.float32)]
    return [FakeDeviceArray(s, d, ptr=(i + 1) << 36) for i, (s, d) in enumerate(shapes)]


def checks() -> tuple[list[str], list[str]]:
    """(kernel files, check() lines): every version on every case, launched as its plan says."""
    lines, files = [], []
    for v in A.ATTN_FWD.values():
        files.append(v.source.file)
        for B, Hq, Hkv, Sq, Sk, D, causal in CASES:
            p = v.validate(*fake(B, Hq, Hkv, Sq, Sk, D), causal=causal)
            for config in (v.all_configs(p) or (None,)):           # every instantiated tile of a tuned version
                (ln,) = v.launches(p, config)
                rest = ", ".join(str(int(a)) if isinstance(a, np.integer) else f"{float(a)!r}f"
                                 for a in ln.args[5:])
                what = f"{v.label} {ln.kernel} B{B} Hq{Hq} Hkv{Hkv} Sq{Sq} Sk{Sk} D{D} causal={causal}"
                launch = emu_launch_code(ln, "(const __nv_bfloat16*)q, (const __nv_bfloat16*)k, "
                                             f"(const __nv_bfloat16*)v, o, l, {rest}")
                lines.append(f'    check("{what}", {B}, {Hq}, {Hkv}, {Sq}, {Sk}, {D}, {str(causal).lower()}, '
                             f'{p.scale!r}f, [&](auto* q, auto* k, auto* v, auto* o, auto* l) {{ {launch}; }});')
    return files, lines


def test_every_version_on_the_cpu(tmp_path):
    files, lines = checks()
    for f in dict.fromkeys(files):                              # dynamic shared memory -> the emulator's buffer
        (tmp_path / Path(f).name).write_text(emulated_source(KERNELS / f))
    run_emulated_driver(tmp_path, DRIVER_HEAD, lines, DRIVER_TAIL, files, [KERNELS / "attention", KERNELS / "include"])


VARLEN_HEAD = r"""
#include "cuda_emu.h"
#include "cuda_bf16.h"
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
%(includes)s

static int runs = 0, fails = 0;

// A packed batch [T, H, D] with offsets cu_q, cu_k; out and lse ([Hq, Tq]) NaN-poisoned; float64 reference per
// (sequence, head, row), bottom-right causal within each sequence.
template <class Launch>
void check(const char* what, std::vector<int> cu_q, std::vector<int> cu_k, int Hq, int Hkv, int D, bool causal,
           float scale, Launch launch) {
    const int B = (int)cu_q.size() - 1, Tq = cu_q[B], Tk = cu_k[B];
    std::mt19937 g(Tq * 31 + Tk * 7 + D + causal);
    std::normal_distribution<float> nd;
    auto draw = [&](size_t n) { std::vector<__nv_bfloat16> x(n); for (auto& e : x) e = __float2bfloat16(nd(g)); return x; };
    auto q = draw((size_t)Tq * Hq * D), k = draw((size_t)Tk * Hkv * D), v = draw((size_t)Tk * Hkv * D);
    std::vector<__nv_bfloat16> out((size_t)Tq * Hq * D, __float2bfloat16(NAN));
    std::vector<float> lse((size_t)Hq * Tq, NAN);
    launch(q.data(), k.data(), v.data(), out.data(), lse.data(), cu_q.data(), cu_k.data());
    int bad = 0;
    double num = 0, den = 0;
    for (int b = 0; b < B; ++b) {
        const int Sq = cu_q[b + 1] - cu_q[b], Sk = cu_k[b + 1] - cu_k[b];
        for (int h = 0; h < Hq; ++h) {
            const int gk = h / (Hq / Hkv);
            for (int i = 0; i < Sq; ++i) {
                const int seen = causal ? std::max(0, std::min(Sk, i + Sk - Sq + 1)) : Sk;
                const size_t qrow = ((size_t)(cu_q[b] + i) * Hq + h) * D;
                auto krow = [&](int j) { return ((size_t)(cu_k[b] + j) * Hkv + gk) * D; };
                std::vector<double> s(seen);
                double m = -INFINITY;
                for (int j = 0; j < seen; ++j) {
                    double acc = 0;
                    for (int d = 0; d < D; ++d) acc += (double)__bfloat162float(q[qrow + d]) * __bfloat162float(k[krow(j) + d]);
                    s[j] = scale * acc;
                    m = std::max(m, s[j]);
                }
                double l = 0;
                for (int j = 0; j < seen; ++j) l += std::exp(s[j] - m);
                for (int d = 0; d < D; ++d) {
                    double r = 0;
                    for (int j = 0; j < seen; ++j) r += std::exp(s[j] - m) * __bfloat162float(v[krow(j) + d]);
                    r = seen ? r / l : 0.0;
                    const float got = __bfloat162float(out[qrow + d]);
                    if (!std::isfinite(got)) ++bad;
                    num += (got - r) * (got - r);
                    den += r * r;
                }
                const double want = seen ? m + std::log(l) : -INFINITY;
                const float got = lse[(size_t)h * Tq + cu_q[b] + i];
                if (seen ? !(std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want))) : !(std::isinf(got) && got < 0)) ++bad;
            }
        }
    }
    ++runs;
    const double rel = std::sqrt(num / (den + 1e-30));
    if (bad || rel > 8e-3) {
        ++fails;
        std::printf("FAIL %%s: relative L2 error of out %%g, %%d bad elements\n", what, rel, bad);
    }
}

int main() {
"""

# (cu_q, cu_k, Hq, Hkv, D, causal): an empty query run, a run longer than a row tile, Sq > Sk (rows that see no
# key), GQA
VARLEN_CASES = [([0, 1, 1, 200, 213], [0, 30, 31, 231, 241], 2, 1, 64, True),
                ([0, 70, 75], [0, 3, 300], 2, 2, 128, False), ([0, 129, 150], [0, 129, 140], 4, 2, 128, True)]


def test_varlen_on_the_cpu(tmp_path):
    v = A.ATTN_FWD_VARLEN["v4_tuned"]
    lines = []
    for cq, ck, Hq, Hkv, D, causal in VARLEN_CASES:
        f = fake_varlen(cq[-1], ck[-1], Hq, Hkv, D)
        p = v.validate(*f, np.array(cq, np.int32), np.array(ck, np.int32), causal=causal)
        (ln,) = v.launches(p)
        rest = ", ".join(str(int(a)) if isinstance(a, np.integer) else f"{float(a)!r}f" for a in ln.args[7:])
        launch = emu_launch_code(ln, "(const __nv_bfloat16*)q, (const __nv_bfloat16*)k, (const __nv_bfloat16*)v, o, l, "
                                     f"cq, ck, {rest}")
        vec = lambda c: "std::vector<int>{" + ", ".join(map(str, c)) + "}"     # noqa: E731
        lines.append(f'    check("{ln.kernel} {cq} {ck} Hq{Hq} Hkv{Hkv} causal={causal}", {vec(cq)}, {vec(ck)}, {Hq}, '
                     f'{Hkv}, {D}, {str(causal).lower()}, {p.scale!r}f, [&](auto* q, auto* k, auto* v, auto* o, '
                     f'auto* l, const int* cq, const int* ck) {{ {launch}; }});')
    (tmp_path / "v04_tuned.cu").write_text(emulated_source(KERNELS / v.source.file))
    run_emulated_driver(tmp_path, VARLEN_HEAD, lines, DRIVER_TAIL, [v.source.file],
                        [KERNELS / "attention", KERNELS / "include"])


def fake_varlen(Tq, Tk, Hq, Hkv, D):
    shapes = [((Tq, Hq, D), bf16()), ((Tk, Hkv, D), bf16()), ((Tk, Hkv, D), bf16()), ((Tq, Hq, D), bf16()),
              ((Hq, Tq), np.float32)]
    return [FakeDeviceArray(s, d, ptr=(i + 1) << 36) for i, (s, d) in enumerate(shapes)]
