// The CUDA C device environment of the fake CUDA driver: what a kernel module sees when the fake
// compiles it for the host (threadIdx and friends, warp shuffles, atomics, device math).
//
// A launch runs every block in turn; a block's threads run warp by warp, the 32 lanes of a warp
// as coroutines on one host thread: a lane runs until it finishes or reaches a warp shuffle,
// and a shuffle completes once all 32 lanes have reached it (all lanes must take part, as
// `__shfl_*_sync(0xffffffff, ...)` requires on a GPU; anything else aborts the launch). There
// is no shared memory, no `__syncthreads()` and no other intrinsic: a module that uses one
// fails to compile, which the fake reports as an NVRTC compile error.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef ACCELSQL_FAKE_SCAN
// The fake's first pass preprocesses a module with this marker to find its kernels' names.
#define __global__ __accelsql_kernel__
#else
#define __global__
#endif
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict

namespace accelsql_fake {

/// A block, grid or thread index (CUDA's `uint3`/`dim3`).
struct Dim3 {
    unsigned int x, y, z;
};

/// The index registers of the lane now running, set by the scheduler before it resumes a lane.
extern thread_local Dim3 thread_idx, block_idx, block_dim, grid_dim;

/// Exchanges `bits` (8 bytes) of the running lane with lane `source(lane)` of its warp; called
/// by every lane of the warp (see the file's comment). Defined by the launcher.
uint64_t exchange(uint64_t bits, int mode, int operand, int width);

enum { SHFL_IDX = 0, SHFL_UP = 1, SHFL_DOWN = 2, SHFL_XOR = 3 };

template <typename T>
inline T shuffle(T value, int mode, int operand, int width)
{
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &value, sizeof(T));
    bits = exchange(bits, mode, operand, width);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}

}  // namespace accelsql_fake

#define threadIdx (accelsql_fake::thread_idx)
#define blockIdx (accelsql_fake::block_idx)
#define blockDim (accelsql_fake::block_dim)
#define gridDim (accelsql_fake::grid_dim)
#define warpSize 32

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int lane, int width = 32)
{
    (void)mask;
    return accelsql_fake::shuffle(v, accelsql_fake::SHFL_IDX, lane, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    (void)mask;
    return accelsql_fake::shuffle(v, accelsql_fake::SHFL_UP, (int)delta, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    (void)mask;
    return accelsql_fake::shuffle(v, accelsql_fake::SHFL_DOWN, (int)delta, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    (void)mask;
    return accelsql_fake::shuffle(v, accelsql_fake::SHFL_XOR, lane_mask, width);
}

// Lanes never run at the same time, so atomics are plain read-modify-writes.
template <typename T>
inline T atomicOr(T* address, T value)
{
    T old = *address;
    *address = old | value;
    return old;
}
template <typename T>
inline T atomicAnd(T* address, T value)
{
    T old = *address;
    *address = old & value;
    return old;
}
template <typename T>
inline T atomicAdd(T* address, T value)
{
    T old = *address;
    *address = old + value;
    return old;
}

inline long long __double_as_longlong(double x)
{
    long long out;
    memcpy(&out, &x, sizeof out);
    return out;
}
inline double __longlong_as_double(long long x)
{
    double out;
    memcpy(&out, &x, sizeof out);
    return out;
}
inline int __float_as_int(float x)
{
    int out;
    memcpy(&out, &x, sizeof out);
    return out;
}
inline float __int_as_float(int x)
{
    float out;
    memcpy(&out, &x, sizeof out);
    return out;
}
