#pragma once
// GGUF v3, the file format of llama.cpp (docs/FORMATS.md): reading and writing the container.
// What the tensors mean for a dqt model lives in export/gguf_model.h.
//
//   "GGUF" | u32 version (3) | i64 tensor count | i64 metadata count
//   | metadata: string key, i32 value type, value
//   | tensor infos: string name, u32 n_dims, i64 ne[n_dims], i32 ggml type, u64 offset
//   | zero padding to general.alignment (32) | tensor data, each padded to the alignment
// Little endian; a string is u64 length + bytes; an array is i32 element type + u64 count +
// elements. ne[0] is the contiguous dimension: a (rows, cols) matrix has ne = [cols, rows].
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace dqt {

enum class GgufValueType : int32_t {
    uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5, float32 = 6, boolean = 7,
    string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12,
};

// The tensor types dqt writes and reads (ggml's numbering).
enum class GgmlType : int32_t { f32 = 0, f16 = 1, q8_0 = 8, tq1_0 = 34, tq2_0 = 35 };

const char* ggml_type_name(GgmlType type);
int64_t ggml_block_size(GgmlType type);  // elements per block
size_t ggml_block_bytes(GgmlType type);  // bytes per block
// Bytes of a tensor of this type and shape; ne[0] must be a multiple of the block size.
size_t ggml_tensor_bytes(GgmlType type, const std::vector<int64_t>& ne);

// One metadata value: its GGUF type (for arrays also the element type) and the value as
// JSON (integers, floats, bools, strings, or an array of them). Floats survive exactly:
// float32 widens to double and narrows back.
struct GgufValue {
    GgufValueType type = GgufValueType::uint32;
    GgufValueType element_type = GgufValueType::uint8;  // arrays only
    nlohmann::json value;
};

struct GgufTensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type = GgmlType::f32;
    std::vector<uint8_t> data;  // ggml_tensor_bytes(type, ne) bytes
};

class GgufWriter {
public:
    void set_u32(const std::string& key, uint32_t value);
    void set_f32(const std::string& key, float value);
    void set_bool(const std::string& key, bool value);
    void set_string(const std::string& key, const std::string& value);
    void set_strings(const std::string& key, const std::vector<std::string>& values);
    void set_f32s(const std::string& key, const std::vector<float>& values);
    void set_i32s(const std::string& key, const std::vector<int32_t>& values);
    void set_bytes(const std::string& key, const std::string& bytes);  // a u8 array
    void add_tensor(GgufTensor tensor);
    // Writes atomically (io/atomic_file.h): on any error the old file, if any, stays.
    void write(const std::string& path) const;

private:
    void set(const std::string& key, GgufValue value);
    std::vector<std::pair<std::string, GgufValue>> metadata_;  // in the order first set
    std::unordered_map<std::string, size_t> metadata_index_;   // key -> its place in metadata_
    std::vector<GgufTensor> tensors_;
    std::unordered_set<std::string> tensor_names_;             // of tensors_, to refuse a duplicate
};

// A parsed GGUF file: metadata and tensor table in memory; tensor data read on request.
// Files dqt writes carry dqt.file_crc32, the CRC-32 of the whole file with that value's own
// 4 bytes read as zero; when present it is checked at open. Files from other tools lack it
// and are read unchecked.
// Every inconsistency (magic, version, a count or length that runs past the end of the file,
// an unsupported tensor type, an offset out of order) is a one-line dqt::Error naming the file.
class GgufReader {
public:
    explicit GgufReader(const std::string& path);

    struct TensorInfo {
        std::string name;
        std::vector<int64_t> ne;
        GgmlType type;
        uint64_t offset;  // from the file start
        size_t bytes;
    };

    const std::string& path() const { return path_; }
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    // nullptr when absent.
    const GgufValue* find(const std::string& key) const;
    const TensorInfo* find_tensor(const std::string& name) const;
    // Typed access; dqt::Error naming the key when it is absent or of another type.
    uint32_t u32(const std::string& key) const;
    float f32(const std::string& key) const;
    std::string string(const std::string& key) const;
    std::vector<uint8_t> read(const TensorInfo& tensor) const;
    // The tensor's bytes into out (tensor.bytes), or only its first `bytes` (at most tensor.bytes).
    void read_into(const TensorInfo& tensor, void* out) const;
    void read_into(const TensorInfo& tensor, void* out, size_t bytes) const;

private:
    std::string path_;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::vector<TensorInfo> tensors_;
    std::unordered_map<std::string, size_t> metadata_index_;  // key -> position in metadata_
    std::unordered_map<std::string, size_t> tensor_index_;    // name -> position in tensors_
};

// True when the file starts with the GGUF magic (false also for a missing or short file).
bool is_gguf_file(const std::string& path);

}  // namespace dqt
