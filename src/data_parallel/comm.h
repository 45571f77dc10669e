#pragma once
// The process group of a data-parallel run: Open MPI's MPI_COMM_WORLD when dqt was started
// by mpirun, a group of one otherwise (no MPI call is made then). Only this file's .cpp
// includes <mpi.h>; the rest of dqt sees ranks, byte ranges and counts.
//
// Gradient transfers are nonblocking collectives collected in one pending list: post them,
// call progress() now and then (Open MPI moves data only inside MPI calls), and wait_all()
// before reading what was received. Every byte this process sends is counted by purpose, so a
// run can report its traffic.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/exact_sum.h"

namespace dqt {

enum class Traffic : int { gradients, weights, other, count };

struct AllToAllArguments;  // one posted all-to-all's MPI arguments, defined where <mpi.h> is

class Communicator {
public:
    // Initialises MPI when the environment says mpirun started this process (a group of one
    // otherwise). Call once, before any other thread exists.
    static void init_from_environment(int* argc, char*** argv);
    // Finalises MPI if it was initialised.
    static void finalize();
    // Ends every process of the job at once (after this process printed its error).
    [[noreturn]] static void abort(int exit_code);

    int rank() const { return rank_; }
    int size() const { return size_; }
    bool is_root() const { return rank_ == 0; }

    void barrier();
    // True on every rank when `mine` is true on any (a stop request seen by one rank).
    bool any(bool mine);
    // `blocks` runs of `count` floats, `stride` floats apart, the first `offset` floats into a buffer.
    struct FloatRuns {
        size_t offset = 0, count = 0, blocks = 0, stride = 0;
    };
    // Nonblocking all-to-all (MPI_Ialltoallw): sends send[r] (runs in send_base) to rank r and
    // receives recv[r] (runs in recv_base) from it; this rank's own entries are ignored. Every
    // rank calls it, in the same order. Counted as `traffic`; completes in wait_all().
    void all_to_all_runs(const float* send_base, const std::vector<FloatRuns>& send, float* recv_base,
                         const std::vector<FloatRuns>& recv, Traffic traffic);
    // The same for contiguous byte ranges (compressed gradients, data_parallel/wire_quantizer.h).
    struct ByteRange {
        size_t offset = 0, count = 0;
    };
    void all_to_all_bytes(const uint8_t* send_base, const std::vector<ByteRange>& send, uint8_t* recv_base,
                          const std::vector<ByteRange>& recv, Traffic traffic);
    void progress();
    void wait_all();

    // Rank r contributes items [cut[r], cut[r+1]) of `base` (items of item_bytes bytes), already
    // in place on rank r; on return every rank holds all of them. Counted as (N-1) times this
    // rank's part: what a ring sends.
    void allgather_in_place(void* base, const std::vector<size_t>& cut, size_t item_bytes, Traffic traffic);
    // Element-wise sum over the ranks of exact (integer) sums, in place; the same on every
    // rank and for any rank count (integer addition has no order).
    void sum_exact(std::vector<ExactSum>& values);
    // Every rank's `mine` (counts[r] doubles from rank r) concatenated in rank order.
    std::vector<double> allgather(const std::vector<double>& mine, const std::vector<int>& counts);
    // Root receives every rank's bytes into `out` at offsets[r] (out is ignored elsewhere).
    void gather_to_root(const void* mine, size_t bytes, void* out, const std::vector<size_t>& offsets,
                        const std::vector<size_t>& sizes);

    int64_t bytes_sent(Traffic traffic) const { return bytes_sent_[static_cast<int>(traffic)]; }
    void reset_counters();

private:
    Communicator();
    int rank_ = 0;
    int size_ = 1;
    // Posts MPI_Ialltoallw with `arguments` (kept until it completes), counts `sent` bytes.
    void post_all_to_all(const void* send_base, void* recv_base, AllToAllArguments&& arguments, int64_t sent,
                         Traffic traffic);
    struct Pending;                    // the MPI_Request list, defined where <mpi.h> is
    std::shared_ptr<Pending> pending_;
    int64_t bytes_sent_[static_cast<int>(Traffic::count)] = {};
    friend Communicator& world();
    friend Communicator& self_group();
};

// The process-wide group (size 1 until init_from_environment found mpirun).
Communicator& world();
// A group of this process alone, whatever the launch (single-process benchmarks).
Communicator& self_group();

// "rank 1 of 2: " under mpirun with more than one rank, "" otherwise (error messages).
std::string rank_prefix();

}  // namespace dqt
