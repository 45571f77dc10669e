#pragma once
// A barrier for a team of threads that meet many times in quick succession (the inference
// forward: four meetings per block, 48 per decoded token). The OpenMP runtime's barrier costs
// about 2 us here; two threads meeting through one atomic counter cost a cache-line transfer.
#include <atomic>
#include <thread>

namespace dqt {

class SpinBarrier {
public:
    // Sets the team size; call while no thread waits (e.g. under `omp single` before the work).
    void set_threads(int threads) { threads_ = threads; }

    // Returns once all threads of the team have arrived. Everything a thread wrote before it
    // arrived is visible to every thread after it returns.
    void arrive_and_wait() {
        const unsigned generation = generation_.load(std::memory_order_acquire);
        if (arrived_.fetch_add(1, std::memory_order_acq_rel) == threads_ - 1) {
            arrived_.store(0, std::memory_order_relaxed);
            generation_.fetch_add(1, std::memory_order_release);
            return;
        }
        // Spin while the others are close; yield afterwards, so that a team with more threads
        // than free cores still moves on.
        for (int spins = 0; generation_.load(std::memory_order_acquire) == generation; ++spins) {
            if (spins < kSpinsBeforeYield) {
                pause();
            } else {
                std::this_thread::yield();
            }
        }
    }

private:
    static constexpr int kSpinsBeforeYield = 1 << 14;

    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }

    int threads_ = 1;
    alignas(64) std::atomic<int> arrived_{0};
    alignas(64) std::atomic<unsigned> generation_{0};
};

}  // namespace dqt
