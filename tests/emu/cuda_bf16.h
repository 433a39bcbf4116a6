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
