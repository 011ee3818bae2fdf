// The launcher half of a fake-CUDA kernel module: runs a kernel's grid on the host, warp by
// warp, the lanes of a warp as coroutines (see fake_kernel.h). Included once per module, after
// the module's source, by the translation unit the fake builds.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <tuple>
#include <type_traits>
#include <utility>

namespace accelsql_fake {

thread_local Dim3 thread_idx, block_idx, block_dim, grid_dim;

/// The grid of one launch, as the fake driver passes it (fake_cuda.cpp has the same layout).
struct Launch {
    unsigned int grid[3];
    unsigned int block[3];
    char* error;       // a message when the launch fails
    size_t error_size; // bytes at `error`
};

enum LaneState { READY, AT_SHUFFLE, DONE };

constexpr size_t LANE_STACK = 256 * 1024;

#if defined(__x86_64__)
// A lane switch saves the callee-saved registers on the running stack, stores its stack
// pointer, and resumes the other stack (glibc's swapcontext also saves the signal mask: a
// system call per switch, too slow for a lane per row).
extern "C" void accelsql_fake_switch(void** save_sp, void* resume_sp);
asm(R"(
    .text
    .p2align 4
    .type accelsql_fake_switch, @function
accelsql_fake_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size accelsql_fake_switch, .-accelsql_fake_switch
)");
#endif

/// The warp now running on this host thread.
struct Warp {
#if defined(__x86_64__)
    void* scheduler_sp;
    void* lane_sp[32];
#else
    ucontext_t scheduler;
    ucontext_t lanes[32];
#endif
    char* stacks = nullptr;
    LaneState state[32];
    Dim3 idx[32];
    int count = 0;
    int current = 0;
    uint64_t slots[2][32];
    unsigned rounds[32];
    void (*body)(void*) = nullptr;
    void* arg = nullptr;
};

thread_local Warp* running = nullptr;

inline int source_lane(int lane, int mode, int operand, int width)
{
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
        width = 32;
    }
    const int base = lane & ~(width - 1);
    const int in = lane - base;
    int src = in;
    switch (mode) {
    case SHFL_IDX: src = operand & (width - 1); break;
    case SHFL_UP: src = in - operand >= 0 ? in - operand : in; break;
    case SHFL_DOWN: src = in + operand < width ? in + operand : in; break;
    case SHFL_XOR: src = (in ^ operand) < width ? (in ^ operand) : in; break;
    default: break;
    }
    return base + src;
}

/// Suspends the running lane and resumes the scheduler.
inline void yield_lane(Warp* w, int lane)
{
#if defined(__x86_64__)
    accelsql_fake_switch(&w->lane_sp[lane], w->scheduler_sp);
#else
    swapcontext(&w->lanes[lane], &w->scheduler);
#endif
}

/// Resumes lane `lane` until it yields or finishes.
inline void resume_lane(Warp* w, int lane)
{
#if defined(__x86_64__)
    accelsql_fake_switch(&w->scheduler_sp, w->lane_sp[lane]);
#else
    swapcontext(&w->scheduler, &w->lanes[lane]);
#endif
}

uint64_t exchange(uint64_t bits, int mode, int operand, int width)
{
    Warp* w = running;
    const int lane = w->current;
    const unsigned parity = w->rounds[lane] & 1u;
    w->slots[parity][lane] = bits;
    w->state[lane] = AT_SHUFFLE;
    yield_lane(w, lane);
    // Every lane has reached this shuffle; slots[parity] holds their values until each of them
    // has read (a lane writes the other parity at its next shuffle).
    int src = source_lane(lane, mode, operand, width);
    if (src >= w->count) {
        src = lane;
    }
    w->rounds[lane]++;
    return w->slots[parity][src];
}

#if defined(__x86_64__)
[[noreturn]] inline void lane_main()
{
    Warp* w = running;
    w->body(w->arg);
    w->state[w->current] = DONE;
    // Back to the scheduler for good: this stack is reset before it runs again.
    void* unused;
    accelsql_fake_switch(&unused, w->scheduler_sp);
    abort();
}

/// Prepares lane `i`'s stack so that resuming it enters lane_main.
inline void start_lane(Warp& w, int i)
{
    char* top = w.stacks + (size_t)(i + 1) * LANE_STACK;
    // The return address sits 16-aligned, so lane_main starts with the stack as a call leaves it.
    void** ret = reinterpret_cast<void**>(top - 16);
    ret[0] = reinterpret_cast<void*>(&lane_main);
    ret[1] = nullptr;
    void** regs = ret - 6;  // r15 r14 r13 r12 rbx rbp
    for (int r = 0; r < 6; r++) {
        regs[r] = nullptr;
    }
    w.lane_sp[i] = regs;
}
#else
inline void lane_entry()
{
    Warp* w = running;
    w->body(w->arg);
    w->state[w->current] = DONE;
}

inline void start_lane(Warp& w, int i)
{
    getcontext(&w.lanes[i]);
    w.lanes[i].uc_stack.ss_sp = w.stacks + (size_t)i * LANE_STACK;
    w.lanes[i].uc_stack.ss_size = LANE_STACK;
    w.lanes[i].uc_link = &w.scheduler;
    makecontext(&w.lanes[i], lane_entry, 0);
}
#endif

/// Runs one warp of `count` lanes (linear thread ids `first` ...); false when its lanes
/// disagree about a shuffle.
inline bool run_warp(Warp& w, unsigned first, const Launch* l)
{
    for (int i = 0; i < w.count; i++) {
        const unsigned t = first + (unsigned)i;
        w.idx[i] = Dim3{t % l->block[0], (t / l->block[0]) % l->block[1],
                        t / (l->block[0] * l->block[1])};
        w.state[i] = READY;
        w.rounds[i] = 0;
        start_lane(w, i);
    }
    for (;;) {
        int done = 0;
        for (int i = 0; i < w.count; i++) {
            if (w.state[i] == DONE) {
                done++;
                continue;
            }
            w.current = i;
            thread_idx = w.idx[i];
            resume_lane(&w, i);
            if (w.state[i] == DONE) {
                done++;
            }
        }
        if (done == w.count) {
            return true;
        }
        if (done != 0) {
            // On a GPU this deadlocks or is undefined; here the suspended lanes are abandoned.
            return false;
        }
        for (int i = 0; i < w.count; i++) {
            w.state[i] = READY;
        }
    }
}

inline int run_grid(const Launch* l, void (*body)(void*), void* arg)
{
    static thread_local Warp warp;
    if (warp.stacks == nullptr) {
        warp.stacks = static_cast<char*>(malloc(32 * LANE_STACK));
        if (warp.stacks == nullptr) {
            snprintf(l->error, l->error_size, "no host memory for the lanes' stacks");
            return 1;
        }
    }
    Warp* outer = running;
    running = &warp;
    warp.body = body;
    warp.arg = arg;
    grid_dim = Dim3{l->grid[0], l->grid[1], l->grid[2]};
    block_dim = Dim3{l->block[0], l->block[1], l->block[2]};
    const unsigned threads = l->block[0] * l->block[1] * l->block[2];
    int status = 0;
    for (unsigned z = 0; z < l->grid[2] && status == 0; z++) {
        for (unsigned y = 0; y < l->grid[1] && status == 0; y++) {
            for (unsigned x = 0; x < l->grid[0] && status == 0; x++) {
                block_idx = Dim3{x, y, z};
                for (unsigned first = 0; first < threads; first += 32) {
                    warp.count = (int)(threads - first < 32 ? threads - first : 32);
                    if (!run_warp(warp, first, l)) {
                        snprintf(l->error, l->error_size,
                                 "block (%u,%u,%u), warp %u: some lanes finished while others "
                                 "wait at a warp shuffle (a GPU hangs or misbehaves here)",
                                 x, y, z, first / 32);
                        status = 1;
                        break;
                    }
                }
            }
        }
    }
    running = outer;
    return status;
}

template <typename T>
using Param = typename std::decay<T>::type;

/// A kernel with its parameters copied out of `cuLaunchKernel`'s argument array (the driver
/// copies them when the launch is enqueued), to run when its stream gets to it (fake_cuda.cpp
/// has the same layout).
struct Bound {
    int (*run)(Bound*, const Launch*);
    void (*drop)(Bound*);
};

template <typename... Args>
struct Call : Bound {
    void (*kernel)(Args...);
    std::tuple<Param<Args>...> args;

    Call(void (*k)(Args...), std::tuple<Param<Args>...> a) : Bound{&run_call, &drop_call}, kernel(k), args(a) {}

    static void body(void* self)
    {
        auto* call = static_cast<Call*>(self);
        std::apply(call->kernel, call->args);
    }

    static int run_call(Bound* bound, const Launch* l)
    {
        return run_grid(l, &Call::body, static_cast<Call*>(bound));
    }

    static void drop_call(Bound* bound) { delete static_cast<Call*>(bound); }
};

template <typename... Args, size_t... I>
std::tuple<Param<Args>...> unpack(void** params, std::index_sequence<I...>)
{
    return std::tuple<Param<Args>...>(*static_cast<Param<Args>*>(params[I])...);
}

/// `kernel` bound to the parameters of a launch (one pointer per kernel parameter, as
/// `cuLaunchKernel` takes them).
template <typename... Args>
Bound* bind(void (*kernel)(Args...), void** params)
{
    return new Call<Args...>(kernel, unpack<Args...>(params, std::index_sequence_for<Args...>{}));
}

}  // namespace accelsql_fake
