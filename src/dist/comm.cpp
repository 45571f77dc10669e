#include "dist/comm.h"

#include <mpi.h>
#include <pthread.h>

#include <csignal>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "core/error.h"

namespace dqt {

struct Communicator::Pending {
    std::vector<MPI_Request> requests;
};

namespace {

bool g_mpi_initialized = false;

// Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMI-based launchers set PMI_SIZE.
bool launched_by_mpirun() {
    return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

void check(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(std::string(what) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

int as_count(size_t n, const char* what) {
    require(n <= static_cast<size_t>(INT_MAX), std::string(what) + ": a transfer of " + std::to_string(n) +
                                                   " items exceeds MPI's int count");
    return static_cast<int>(n);
}

}  // namespace

Communicator::Communicator() : pending_(std::make_shared<Pending>()) {}

Communicator& world() {
    static Communicator instance;
    return instance;
}

Communicator& self_group() {
    static Communicator instance;
    return instance;
}

void Communicator::init_from_environment(int* argc, char*** argv) {
    Communicator& w = world();
    if (!launched_by_mpirun()) return;
    int provided = 0;
    // SIGINT stays blocked in every thread of a rank (MPI's and OpenMP's threads inherit the
    // mask). With a SIGINT handler that interrupted the ranks mid-run, 2-rank runs over Open
    // MPI 4.1.4's shared-memory transport died of heap corruption in about 1 of 8 trials (none
    // over TCP, none on 1 rank, none in 20 trials with the signal blocked; docs/data-parallel.md).
    // The training loop takes a pending SIGINT at step boundaries instead (train/trainer.cpp).
    sigset_t interrupt;
    sigemptyset(&interrupt);
    sigaddset(&interrupt, SIGINT);
    pthread_sigmask(SIG_BLOCK, &interrupt, nullptr);
    // Only the main thread calls MPI (OpenMP regions never do).
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    g_mpi_initialized = true;
    // Errors come back as codes (turned into dqt::Error) instead of aborting inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
    void* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    if (found) w.max_tag_ = *static_cast<int*>(tag_ub);
}

void Communicator::finalize() {
    if (g_mpi_initialized) MPI_Finalize();
    g_mpi_initialized = false;
}

void Communicator::abort(int exit_code) {
    if (g_mpi_initialized) MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::exit(exit_code);
}

void Communicator::barrier() {
    if (size_ > 1) check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

bool Communicator::any(bool mine) {
    if (size_ == 1) return mine;
    int flag = mine ? 1 : 0, result = 0;
    check(MPI_Allreduce(&flag, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return result != 0;
}

void Communicator::isend(const void* data, size_t bytes, int to, int tag, Traffic traffic) {
    MPI_Request request;
    check(MPI_Isend(data, as_count(bytes, "MPI_Isend"), MPI_BYTE, to, tag, MPI_COMM_WORLD, &request), "MPI_Isend");
    pending_->requests.push_back(request);
    bytes_sent_[static_cast<int>(traffic)] += static_cast<int64_t>(bytes);
}

void Communicator::irecv(void* data, size_t bytes, int from, int tag) {
    MPI_Request request;
    check(MPI_Irecv(data, as_count(bytes, "MPI_Irecv"), MPI_BYTE, from, tag, MPI_COMM_WORLD, &request), "MPI_Irecv");
    pending_->requests.push_back(request);
}

void Communicator::progress() {
    if (pending_->requests.empty()) return;
    int done = 0;
    check(MPI_Testall(static_cast<int>(pending_->requests.size()), pending_->requests.data(), &done,
                      MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (done) pending_->requests.clear();
}

void Communicator::wait_all() {
    if (pending_->requests.empty()) return;
    check(MPI_Waitall(static_cast<int>(pending_->requests.size()), pending_->requests.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
    pending_->requests.clear();
}

void Communicator::allgather_in_place(void* base, const std::vector<size_t>& begin, const std::vector<size_t>& end,
                                      Traffic traffic) {
    if (size_ == 1) return;
    std::vector<int> counts(static_cast<size_t>(size_)), displacements(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
        counts[r] = as_count(end[r] - begin[r], "MPI_Allgatherv");
        displacements[r] = as_count(begin[r], "MPI_Allgatherv");
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, counts.data(), displacements.data(), MPI_BYTE,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    bytes_sent_[static_cast<int>(traffic)] += static_cast<int64_t>(size_ - 1) * counts[rank_];
}

std::vector<double> Communicator::allgather(const std::vector<double>& mine, const std::vector<int>& counts) {
    if (size_ == 1) return mine;
    std::vector<int> displacements(static_cast<size_t>(size_), 0);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
        displacements[r] = total;
        total += counts[r];
    }
    std::vector<double> all(static_cast<size_t>(total));
    check(MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), counts.data(),
                         displacements.data(), MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Allgatherv");
    bytes_sent_[static_cast<int>(Traffic::other)] += static_cast<int64_t>(size_ - 1) * mine.size() * sizeof(double);
    return all;
}

void Communicator::gather_to_root(const void* mine, size_t bytes, void* out, const std::vector<size_t>& offsets,
                                  const std::vector<size_t>& sizes) {
    if (size_ == 1) {
        if (bytes > 0) std::copy_n(static_cast<const char*>(mine), bytes, static_cast<char*>(out) + offsets[0]);
        return;
    }
    std::vector<int> counts(static_cast<size_t>(size_)), displacements(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
        counts[r] = as_count(sizes[r], "MPI_Gatherv");
        displacements[r] = as_count(offsets[r], "MPI_Gatherv");
    }
    check(MPI_Gatherv(mine, as_count(bytes, "MPI_Gatherv"), MPI_BYTE, out, counts.data(), displacements.data(),
                      MPI_BYTE, 0, MPI_COMM_WORLD),
          "MPI_Gatherv");
    if (rank_ != 0) bytes_sent_[static_cast<int>(Traffic::other)] += static_cast<int64_t>(bytes);
}

void Communicator::reset_counters() {
    for (int64_t& bytes : bytes_sent_) bytes = 0;
}

std::string rank_prefix() {
    const Communicator& w = world();
    if (w.size() == 1) return "";
    return "rank " + std::to_string(w.rank()) + " of " + std::to_string(w.size()) + ": ";
}

}  // namespace dqt
