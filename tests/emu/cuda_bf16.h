// cuda_bf16.h stand-in for the CPU emulation (tests/emu/cuda_emu.h): bf16 as its 16 raw bits, converted
// with round-to-nearest-even as the GPU's __float2bfloat16 does.
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 { unsigned short bits; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };

inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = uint32_t(h.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fc0};        // NaN stays a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                // round to nearest, ties to even
    return {static_cast<unsigned short>(u >> 16)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }

// bf16x2 arithmetic as the GPU's HFMA2.BF16 family does it: the exact result (products and sums of bf16 are exact
// in double here) rounded once to bf16, to nearest even.
inline __nv_bfloat16 emu_bf16_from_double(double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    if ((u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return {0x7fc0};
    u += ((1ull << 44) - 1) + ((u >> 45) & 1);                     // keep 7 mantissa bits, ties to even
    u &= ~((1ull << 45) - 1);
    double r;
    std::memcpy(&r, &u, 8);
    return __float2bfloat16(static_cast<float>(r));               // exact: r has a bf16 mantissa
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 h) { return {h, h}; }
template <class F>
inline __nv_bfloat162 emu_bf162_map(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c, F f) {
    auto d = [](__nv_bfloat16 h) { return static_cast<double>(__bfloat162float(h)); };
    return {emu_bf16_from_double(f(d(a.x), d(b.x), d(c.x))), emu_bf16_from_double(f(d(a.y), d(b.y), d(c.y)))};
}
inline __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) {
    return emu_bf162_map(a, b, b, [](double x, double y, double) { return x - y; });
}
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) {
    return emu_bf162_map(a, b, b, [](double x, double y, double) { return x * y; });
}
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return emu_bf162_map(a, b, c, [](double x, double y, double z) { return x * y + z; });
}
