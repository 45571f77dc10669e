#include "io/background_checkpoint.h"

#include <cstring>
#include <utility>

namespace dqt {

namespace {

constexpr size_t kAlignment = 64;

size_t align_up(size_t value) { return (value + kAlignment - 1) / kAlignment * kAlignment; }

// Bytes of the copy: every tensor at a 64-byte aligned offset.
size_t copy_bytes(const std::vector<TensorView>& tensors) {
    size_t bytes = 0;
    for (const TensorView& tensor : tensors) bytes = align_up(bytes) + tensor.nbytes;
    return bytes;
}

}  // namespace

BackgroundCheckpointWriter::~BackgroundCheckpointWriter() {
    if (thread_.joinable()) thread_.join();
}

void BackgroundCheckpointWriter::wait() {
    if (thread_.joinable()) thread_.join();
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void BackgroundCheckpointWriter::reserve(const std::vector<TensorView>& tensors) {
    wait();
    const size_t needed = copy_bytes(tensors);
    if (storage_.bytes() >= needed) return;
    storage_.release();
    thread_ = std::thread([this, needed] {
        try {
            storage_ = Buffer(MemCategory::snapshot, needed);  // zeroed: every page touched here
        } catch (...) {
            failure_ = std::current_exception();
        }
    });
}

void BackgroundCheckpointWriter::write(const std::string& path, const nlohmann::json& meta,
                                       const std::vector<TensorView>& tensors) {
    wait();
    const size_t needed = copy_bytes(tensors);
    // Kept between writes: a fresh buffer would be zeroed and faulted in during the pause.
    if (storage_.bytes() < needed) {
        storage_.release();
        storage_ = Buffer(MemCategory::snapshot, needed);
    }
    copies_.clear();
    auto* base = storage_.as<unsigned char>();
    size_t offset = 0;
    for (const TensorView& tensor : tensors) {
        offset = align_up(offset);
        if (tensor.nbytes > 0) std::memcpy(base + offset, tensor.data, tensor.nbytes);
        copies_.push_back({tensor.name, tensor.dtype, tensor.shape, base + offset, tensor.nbytes});
        offset += tensor.nbytes;
    }
    meta_ = meta;
    path_ = path;
    thread_ = std::thread([this] {
        try {
            save_checkpoint(path_, meta_, copies_);
        } catch (...) {
            failure_ = std::current_exception();
        }
    });
}

}  // namespace dqt
