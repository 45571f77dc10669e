#include "core/parallel.h"

#include <omp.h>

#include <cstdlib>

namespace dqt {

void set_num_threads(int threads) {
    if (threads <= 0) {
        // No --threads: OMP_NUM_THREADS, when set, has already sized the runtime's default.
        if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
        threads = omp_get_num_procs();
    }
    omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace dqt
