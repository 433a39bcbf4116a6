// cuda_fp16.h stand-in for the CPU emulation: fp16 as its 16 raw bits, the half2 arithmetic int4.cuh's fp16
// conversion uses done in the compiler's _Float16 (IEEE binary16, round to nearest even).
#pragma once
#include <cstring>

struct __half { unsigned short bits; };
struct alignas(4) __half2 { __half x, y; };

inline _Float16 emu_f16(__half h) {
    _Float16 f;
    std::memcpy(&f, &h.bits, 2);
    return f;
}
inline __half emu_half(_Float16 f) {
    __half h;
    std::memcpy(&h.bits, &f, 2);
    return h;
}
inline __half2 __hsub2(__half2 a, __half2 b) {
    return {emu_half(emu_f16(a.x) - emu_f16(b.x)), emu_half(emu_f16(a.y) - emu_f16(b.y))};
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {   // one rounding, as HFMA2 does
    auto fma = [](__half p, __half q, __half r) {
        return emu_half(static_cast<_Float16>(static_cast<double>(emu_f16(p)) * emu_f16(q) + emu_f16(r)));
    };
    return {fma(a.x, b.x, c.x), fma(a.y, b.y, c.y)};
}
