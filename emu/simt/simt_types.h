/* simt_types.h: the CUDA built-in vector types the SIMT emulator needs
 * (dim3, uint3, and the 16-byte float4 and uint4 of vector loads), in the
 * global namespace as in CUDA, so that kernel and launcher code compiles
 * unchanged with nvcc and with the host C++ compiler. */
#ifndef BURST_EMU_SIMT_TYPES_H
#define BURST_EMU_SIMT_TYPES_H

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct alignas(16) float4 {
    float x, y, z, w;
};

struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

#endif
