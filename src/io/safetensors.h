#pragma once
// Reads Hugging Face's safetensors files (the format of model.safetensors; huggingface/safetensors
// README): little-endian u64 N | N bytes of JSON header | data. The header maps each tensor's name
// to {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]} (offsets into the data,
// which the tensors must tile exactly), plus an optional "__metadata__" of string values.
// The file is untrusted input: every length and offset is checked against the file before it is
// used, and every problem is a one-line dqt::Error naming the file. Tensors are read when asked
// for, so memory is the header and what the caller reads.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/file_reader.h"

namespace dqt {

// Longest header accepted: the reference implementation's limit.
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

class SafetensorsReader {
public:
    explicit SafetensorsReader(const std::string& path);

    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // Tensor names in the order of their data.
    const std::vector<std::string>& names() const { return names_; }
    bool has(const std::string& name) const { return tensors_.count(name) != 0; }
    const std::vector<int64_t>& shape(const std::string& name) const;
    const std::string& dtype(const std::string& name) const;  // "F32", "BF16", "I32", ...
    int64_t element_count(const std::string& name) const;

    // The tensor's values as fp32: F32 as stored, F16, BF16 and F64 converted (F64 rounded to
    // nearest); other dtypes are an error.
    std::vector<float> read_f32(const std::string& name) const;
    // An I32 tensor's values; other dtypes are an error.
    std::vector<int32_t> read_i32(const std::string& name) const;
    // An I8 tensor's values; other dtypes are an error.
    std::vector<int8_t> read_i8(const std::string& name) const;

private:
    struct Entry {
        std::string dtype;
        std::vector<int64_t> shape;
        uint64_t begin = 0, end = 0;  // into the data area
    };
    const Entry& entry(const std::string& name) const;
    std::vector<uint8_t> read_bytes(const Entry& entry) const;

    std::string path_;
    std::unique_ptr<FileReader> file_;
    uint64_t data_start_ = 0;
    std::map<std::string, std::string> metadata_;
    std::map<std::string, Entry> tensors_;
    std::vector<std::string> names_;
};

// One tensor to write: `bytes` gives its data (row-major, little endian, exactly
// product(shape) elements of dtype "F32" or "I8") when the writer reaches it, so a large model
// is written holding one tensor at a time.
struct SafetensorsTensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::function<std::string()> bytes;
};

// Writes a safetensors file atomically (io/atomic_file.h): the tensors' data in the given order,
// the header's JSON padded with spaces to a multiple of 8 bytes (as the reference writer pads it).
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace dqt
