#pragma once
// Thread control. dqt parallelises with OpenMP; oneDNN shares the same runtime (libgomp),
// so one setting governs both and the cores are never oversubscribed.
namespace dqt {

// Sets the number of compute threads (0 = OMP_NUM_THREADS if set, else one per available core).
// dqt::Error for a negative count or one above the CPUs this process may use.
void set_num_threads(int threads);
int num_threads();

}  // namespace dqt
