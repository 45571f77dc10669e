#pragma once
// Generic checkpoint container: caller metadata (JSON) plus named tensors, with a checksum
// per tensor and over the whole file. Layout (little endian; docs/FORMATS.md):
//   "DQTCKPT\0" | u32 version | u64 header_len | header JSON {"meta":..., "tensors":[...]}
//   | tensor payloads, each at a 64-byte aligned file offset, zero padding between
//   | u32 crc32 of every byte before it | "DQTEND\0\0"
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/file_reader.h"

namespace dqt {

inline constexpr uint32_t kCheckpointVersion = 1;

// Bytes per element of a dtype name ("f32", "f16", "bf16", "f64", "i8", "u8", "i16", "u16",
// "i32", "u32", "i64", "u64"); 0 when the name is unknown.
size_t dtype_size(const std::string& dtype);

// One tensor to save: nbytes must equal product(shape) * dtype_size(dtype).
struct TensorView {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    size_t nbytes = 0;
};

// Writes atomically (temporary file, fsync, rename): on any error path keeps its old
// contents. Tensor names must be unique and non-empty.
void save_checkpoint(const std::string& path, const nlohmann::json& meta, const std::vector<TensorView>& tensors);

// Opens a checkpoint and validates it on construction (magic, version, lengths, tensor table,
// the whole-file checksum, read in bounded chunks); read() then reads one tensor from the file
// and checks its own checksum. Memory is the header and what the caller reads, never the whole
// file (an evaluation does not hold a run's optimizer state). Every problem is a one-line
// dqt::Error naming the file.
class CheckpointReader {
public:
    explicit CheckpointReader(const std::string& path);

    const nlohmann::json& meta() const { return meta_; }
    bool has(const std::string& name) const { return tensors_.count(name) != 0; }
    std::vector<int64_t> shape(const std::string& name) const;
    std::string dtype(const std::string& name) const;
    // Tensor names in file order.
    std::vector<std::string> names() const { return names_; }

    // Copies tensor `name` into out after checking it exists and has the expected dtype and
    // shape (a mismatch means the checkpoint was written for another model config).
    void read(const std::string& name, const std::string& expected_dtype, const std::vector<int64_t>& expected_shape,
              void* out, size_t out_nbytes) const;

private:
    struct Entry {
        std::string dtype;
        std::vector<int64_t> shape;
        uint64_t offset = 0;
        uint64_t nbytes = 0;
        uint32_t crc32 = 0;
    };
    const Entry& entry(const std::string& name) const;

    std::string path_;
    std::unique_ptr<FileReader> file_;
    nlohmann::json meta_;
    std::map<std::string, Entry> tensors_;
    std::vector<std::string> names_;
};

}  // namespace dqt
