#include "core/parallel.h"

#include <omp.h>

namespace dqt {

void set_num_threads(int threads) {
    if (threads <= 0) threads = omp_get_num_procs();
    omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace dqt
