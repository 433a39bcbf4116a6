// tma_sm90.cuh: Hopper's mbarrier and TMA (cp.async.bulk.tensor) as device functions, shared by chapter 12's
// GEMMs, chapter 17's TMA demo (tma_copy.cu) and the attention kernels. Every function is one or two PTX
// instructions; tests/emu/tma_sm90.cuh is their CPU stand-in.
//
// mbarrier: a 64-bit word in shared memory that counts arrivals and transaction bytes. A phase completes when
// the expected arrivals have arrived and every byte announced with expect_tx has landed; then the barrier
// starts the next phase (its parity flips) with the arrival count it was initialised with.
// TMA coordinates count innermost first: {column, row}; the tensor map (a 128-byte CUtensorMap built by
// utils.tma) arrives by value as a const __grid_constant__ kernel parameter.
#pragma once
#include "mma_sm80.cuh"   // smem_addr

struct alignas(64) TmaDescriptor {
    unsigned long long words[16];  // opaque, 128 bytes, as cuTensorMapEncodeTiled wrote them
};

__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Make the initialised barriers visible to the async proxy (TMA's complete_tx) and to the other threads.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival, plus "expect this many bytes": the phase completes when both counts reach zero.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}

// Whether the phase of parity `phase` has completed (a fresh barrier is in phase 0: parity 1 counts as done).
__device__ __forceinline__ bool mbarrier_try_wait(unsigned long long* bar, unsigned phase) {
    unsigned done;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(phase) : "memory");
    return done != 0;
}

__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned phase) {
    while (!mbarrier_try_wait(bar, phase)) {
    }
}

// Order this thread's earlier shared-memory accesses (generic proxy) before later TMA accesses (async proxy)
// to the same shared memory.
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// One box of a 2-D tensor into shared memory; its bytes count against `bar`'s expected transaction bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDescriptor* map, int col, int row,
                                            unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)),
                    "r"(col), "r"(row), "r"(smem_addr(bar))
                 : "memory");
}

// One box from shared memory to a 2-D tensor (clipped at the tensor's edges), in this thread's bulk group.
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* map, int col, int row, const void* src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row), "r"(smem_addr(src))
                 : "memory");
}

// Close this thread's bulk group of TMA stores.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's store groups still read shared memory (the buffer may be rewritten).
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
// Wait until this thread's store groups are complete (written to global memory).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Wait until every store this thread committed has finished reading shared memory.
__device__ __forceinline__ void tma_store_commit_and_wait_read() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
