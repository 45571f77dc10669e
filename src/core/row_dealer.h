#pragma once
// Deals the rows of a team's products out as the threads ask for them, rather than in equal
// shares fixed beforehand: on a VM's vCPUs two threads given equal shares of a decode product
// finish apart, and the first spun at the next meeting for a tenth of a 2B model's decode
// (perf, Zen 3). Guided: each claim takes a part of what is left (half of it over the team,
// at least `align` rows), so a phase costs the team a few claims per thread and ends within a
// small claim of together.
//
// Every thread runs the same phases in the same order and keeps its own `dealt` (the rows
// dealt before the current phase); the dealer's count passes the phases' totals one after
// another, so no thread resets anything between phases. Threads must meet (a barrier) between
// one phase and the next, and reset() runs while none claims.
#include <algorithm>
#include <atomic>
#include <cstdint>

namespace dqt {

class RowDealer {
public:
    void reset() { next_.store(0, std::memory_order_relaxed); }

    // The next rows [begin, end) of a phase of `total` rows (a multiple of `align` but for
    // its last claim) among `threads`; false when the phase has none left. `dealt`: this thread's
    // count of rows dealt before the phase.
    bool claim(int64_t dealt, int total, int threads, int align, int& begin, int& end) {
        int64_t next = next_.load(std::memory_order_relaxed);
        for (;;) {
            const int done = static_cast<int>(next - dealt);
            if (done >= total) return false;
            const int left = total - done;
            const int guided = (left / (2 * threads) + align - 1) / align * align;
            const int size = std::min(left, std::max(align, guided));
            if (next_.compare_exchange_weak(next, next + size, std::memory_order_relaxed)) {
                begin = done;
                end = done + size;
                return true;
            }
        }
    }

private:
    alignas(64) std::atomic<int64_t> next_{0};
};

}  // namespace dqt
