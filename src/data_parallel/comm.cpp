#include "data_parallel/comm.h"

#include <mpi.h>
#include <pthread.h>

#include <csignal>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "core/error.h"

namespace dqt {

// The argument arrays of one posted all-to-all: MPI reads them until the transfer completes.
struct AllToAllArguments {
    std::vector<int> send_counts, send_displacements, recv_counts, recv_displacements;
    // `element` (MPI_FLOAT or MPI_BYTE), or strided types this owns.
    std::vector<MPI_Datatype> send_types, recv_types;
    MPI_Datatype element;
    AllToAllArguments(size_t ranks, MPI_Datatype element_type)
        : send_counts(ranks, 0),
          send_displacements(ranks, 0),
          recv_counts(ranks, 0),
          recv_displacements(ranks, 0),
          send_types(ranks, element_type),
          recv_types(ranks, element_type),
          element(element_type) {}
    void free_types() {
        for (std::vector<MPI_Datatype>* types : {&send_types, &recv_types}) {
            for (MPI_Datatype& type : *types) {
                if (type != element) MPI_Type_free(&type);
            }
        }
    }
};

struct Communicator::Pending {
    std::vector<MPI_Request> requests;
    std::vector<AllToAllArguments> arguments;  // of the posted all-to-alls, until they complete
    void completed() {
        requests.clear();
        for (AllToAllArguments& posted : arguments) posted.free_types();
        arguments.clear();
    }
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

void Communicator::all_to_all_runs(const float* send_base, const std::vector<FloatRuns>& send, float* recv_base,
                                   const std::vector<FloatRuns>& recv, Traffic traffic) {
    if (size_ == 1) return;
    const size_t ranks = static_cast<size_t>(size_);
    AllToAllArguments a(ranks, MPI_FLOAT);
    // One strided datatype per peer and direction.
    auto describe = [](const FloatRuns& runs, int& count, int& displacement, MPI_Datatype& type) {
        if (runs.count == 0 || runs.blocks == 0) return;
        check(MPI_Type_create_hvector(as_count(runs.blocks, "MPI_Type_create_hvector"),
                                      as_count(runs.count, "MPI_Type_create_hvector"),
                                      static_cast<MPI_Aint>(runs.stride * sizeof(float)), MPI_FLOAT, &type),
              "MPI_Type_create_hvector");
        check(MPI_Type_commit(&type), "MPI_Type_commit");
        count = 1;
        displacement = as_count(runs.offset * sizeof(float), "MPI_Ialltoallw");
    };
    int64_t sent = 0;
    for (size_t r = 0; r < ranks; ++r) {
        if (r == static_cast<size_t>(rank_)) continue;
        describe(send[r], a.send_counts[r], a.send_displacements[r], a.send_types[r]);
        describe(recv[r], a.recv_counts[r], a.recv_displacements[r], a.recv_types[r]);
        if (a.send_counts[r] > 0) sent += static_cast<int64_t>(send[r].count * send[r].blocks * sizeof(float));
    }
    post_all_to_all(send_base, recv_base, std::move(a), sent, traffic);
}

void Communicator::all_to_all_bytes(const uint8_t* send_base, const std::vector<ByteRange>& send, uint8_t* recv_base,
                                    const std::vector<ByteRange>& recv, Traffic traffic) {
    if (size_ == 1) return;
    const size_t ranks = static_cast<size_t>(size_);
    AllToAllArguments a(ranks, MPI_BYTE);
    int64_t sent = 0;
    for (size_t r = 0; r < ranks; ++r) {
        if (r == static_cast<size_t>(rank_)) continue;
        a.send_counts[r] = as_count(send[r].count, "MPI_Ialltoallw");
        a.send_displacements[r] = as_count(send[r].offset, "MPI_Ialltoallw");
        a.recv_counts[r] = as_count(recv[r].count, "MPI_Ialltoallw");
        a.recv_displacements[r] = as_count(recv[r].offset, "MPI_Ialltoallw");
        sent += static_cast<int64_t>(send[r].count);
    }
    post_all_to_all(send_base, recv_base, std::move(a), sent, traffic);
}

void Communicator::post_all_to_all(const void* send_base, void* recv_base, AllToAllArguments&& a, int64_t sent,
                                   Traffic traffic) {
    MPI_Request request;
    const int code = MPI_Ialltoallw(send_base, a.send_counts.data(), a.send_displacements.data(), a.send_types.data(),
                                    recv_base, a.recv_counts.data(), a.recv_displacements.data(),
                                    a.recv_types.data(), MPI_COMM_WORLD, &request);
    pending_->arguments.push_back(std::move(a));
    check(code, "MPI_Ialltoallw");
    pending_->requests.push_back(request);
    bytes_sent_[static_cast<int>(traffic)] += sent;
}

void Communicator::progress() {
    if (pending_->requests.empty()) return;
    int done = 0;
    check(MPI_Testall(static_cast<int>(pending_->requests.size()), pending_->requests.data(), &done,
                      MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (done) pending_->completed();
}

void Communicator::wait_all() {
    if (pending_->requests.empty()) return;
    check(MPI_Waitall(static_cast<int>(pending_->requests.size()), pending_->requests.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
    pending_->completed();
}

void Communicator::allgather_in_place(void* base, const std::vector<size_t>& cut, size_t item_bytes,
                                      Traffic traffic) {
    if (size_ == 1) return;
    std::vector<int> counts(static_cast<size_t>(size_)), displacements(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
        counts[r] = as_count((cut[r + 1] - cut[r]) * item_bytes, "MPI_Allgatherv");
        displacements[r] = as_count(cut[r] * item_bytes, "MPI_Allgatherv");
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, base, counts.data(), displacements.data(), MPI_BYTE,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    bytes_sent_[static_cast<int>(traffic)] += static_cast<int64_t>(size_ - 1) * counts[rank_];
}

void Communicator::sum_exact(std::vector<ExactSum>& values) {
    if (size_ == 1) return;
    const size_t count = values.size();
    std::vector<ExactSum> all(count * static_cast<size_t>(size_));  // (ranks, count)
    std::copy(values.begin(), values.end(), all.begin() + static_cast<std::ptrdiff_t>(count * rank_));
    std::vector<size_t> cut;
    for (int r = 0; r <= size_; ++r) cut.push_back(count * static_cast<size_t>(r));
    allgather_in_place(all.data(), cut, sizeof(ExactSum), Traffic::other);
    for (size_t i = 0; i < count; ++i) {
        values[i] = 0;
        for (int r = 0; r < size_; ++r) values[i] += all[static_cast<size_t>(r) * count + i];
    }
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
