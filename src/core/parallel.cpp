#include "core/parallel.h"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace dqt {

void set_num_threads(int threads) {
    const int cpus = omp_get_num_procs();  // the CPUs this process may run on
    require(threads >= 0, "--threads must be 0 (one per CPU) or positive, got " + std::to_string(threads));
    // More threads than CPUs only wait on each other (10,000 saturated a 2-core machine).
    require(threads <= cpus, "--threads " + std::to_string(threads) + " is more than the " + std::to_string(cpus) +
                                 " CPUs this process may use: use at most " + std::to_string(cpus) +
                                 " (0 = one per CPU)");
    if (threads == 0) {
        // No --threads: OMP_NUM_THREADS, when set, has already sized the runtime's default.
        if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
        threads = cpus;
    }
    omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace dqt
