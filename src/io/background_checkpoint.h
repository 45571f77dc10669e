#pragma once
// Checkpoints written while training goes on. write() copies the checkpoint's bytes into a
// buffer the writer owns (the pause the step loop sees) and a thread of its own then writes
// that copy with save_checkpoint: the same file, byte for byte, atomic and checksummed. One
// write at a time: the next write() first waits for the one under way, so memory is bounded by
// one copy, which the writer keeps and reuses (MemCategory::snapshot).
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/memory.h"
#include "io/checkpoint.h"

namespace dqt {

class BackgroundCheckpointWriter {
public:
    BackgroundCheckpointWriter() = default;
    // Waits for the write under way. Its failure, if any, is dropped here: call wait() first.
    ~BackgroundCheckpointWriter();
    BackgroundCheckpointWriter(const BackgroundCheckpointWriter&) = delete;
    BackgroundCheckpointWriter& operator=(const BackgroundCheckpointWriter&) = delete;

    // Allocates the copy's memory for tensors of these sizes on the writer's thread, so that the
    // first write() does not fault it in during its pause (fresh pages cost about 1 s per
    // 300 MB on the VM of docs/results.md). Optional: write() allocates what is missing.
    void reserve(const std::vector<TensorView>& tensors);
    // Waits for the previous write (throwing its failure), copies meta and every tensor, then
    // starts writing them to path and returns: the caller may change the tensors right away.
    void write(const std::string& path, const nlohmann::json& meta, const std::vector<TensorView>& tensors);
    // Returns when the write under way (if any) is on disk; throws its failure (dqt::Error).
    void wait();
    // Bytes of the copy the writer holds (0 before the first write); after wait().
    size_t snapshot_bytes() const { return storage_.bytes(); }

private:
    std::thread thread_;
    Buffer storage_;                  // the tensors' bytes, each at a 64-byte aligned offset
    std::vector<TensorView> copies_;  // the tensors, pointing into storage_
    nlohmann::json meta_;
    std::string path_;
    std::exception_ptr failure_;      // set by the thread, read after joining it
};

}  // namespace dqt
