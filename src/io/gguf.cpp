#include "io/gguf.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <optional>

#include "core/checksum.h"
#include "core/error.h"
#include "io/atomic_file.h"

namespace dqt {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;  // general.alignment's default; dqt writes it explicitly too
constexpr const char* kChecksumKey = "dqt.file_crc32";

uint64_t pad_to(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

size_t scalar_size(GgufValueType type) {
    switch (type) {
        case GgufValueType::uint8:
        case GgufValueType::int8:
        case GgufValueType::boolean: return 1;
        case GgufValueType::uint16:
        case GgufValueType::int16: return 2;
        case GgufValueType::uint32:
        case GgufValueType::int32:
        case GgufValueType::float32: return 4;
        case GgufValueType::uint64:
        case GgufValueType::int64:
        case GgufValueType::float64: return 8;
        case GgufValueType::string: return 8;  // at least its length field
        case GgufValueType::array: return 12;  // at least type + count
    }
    return 0;
}

bool known_value_type(int32_t type) { return type >= 0 && type <= 12; }

// ---- writing ------------------------------------------------------------------------------

class ByteSink {
public:
    template <typename T>
    void put(T value) {
        const size_t at = bytes_.size();
        bytes_.resize(at + sizeof(T));
        std::memcpy(bytes_.data() + at, &value, sizeof(T));
    }
    void put_bytes(const void* data, size_t count) { bytes_.append(static_cast<const char*>(data), count); }
    void put_string(const std::string& s) {
        put<uint64_t>(s.size());
        bytes_.insert(bytes_.end(), s.begin(), s.end());
    }
    void pad(uint64_t alignment) { bytes_.resize(pad_to(bytes_.size(), alignment), '\0'); }
    size_t size() const { return bytes_.size(); }
    void overwrite(size_t at, const void* data, size_t count) { std::memcpy(bytes_.data() + at, data, count); }
    const std::string& bytes() const { return bytes_; }

private:
    std::string bytes_;
};

void put_scalar(ByteSink& out, GgufValueType type, const nlohmann::json& v) {
    switch (type) {
        case GgufValueType::uint8: out.put(v.get<uint8_t>()); break;
        case GgufValueType::int8: out.put(v.get<int8_t>()); break;
        case GgufValueType::uint16: out.put(v.get<uint16_t>()); break;
        case GgufValueType::int16: out.put(v.get<int16_t>()); break;
        case GgufValueType::uint32: out.put(v.get<uint32_t>()); break;
        case GgufValueType::int32: out.put(v.get<int32_t>()); break;
        case GgufValueType::float32: out.put(v.get<float>()); break;
        case GgufValueType::boolean: out.put<int8_t>(v.get<bool>() ? 1 : 0); break;
        case GgufValueType::string: out.put_string(v.get<std::string>()); break;
        case GgufValueType::uint64: out.put(v.get<uint64_t>()); break;
        case GgufValueType::int64: out.put(v.get<int64_t>()); break;
        case GgufValueType::float64: out.put(v.get<double>()); break;
        case GgufValueType::array: throw Error("gguf: nested arrays are not supported");
    }
}

// ---- reading ------------------------------------------------------------------------------

// Sequential reads that never pass the end of the file.
class Cursor {
public:
    Cursor(const std::string& path, std::ifstream& file, uint64_t size) : path_(path), file_(file), size_(size) {}

    uint64_t position() const { return position_; }
    uint64_t remaining() const { return size_ - position_; }

    void read(void* out, uint64_t bytes, const char* what) {
        require(bytes <= remaining(), "GGUF file " + path_ + " is truncated: " + what + " runs past its end");
        file_.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
        require(file_.good(), "cannot read GGUF file " + path_);
        position_ += bytes;
    }
    template <typename T>
    T get(const char* what) {
        T value;
        read(&value, sizeof value, what);
        return value;
    }
    std::string get_string(const char* what) {
        const uint64_t length = get<uint64_t>(what);
        require(length <= remaining(), "GGUF file " + path_ + " is truncated: " + what + " runs past its end");
        std::string s(length, '\0');
        read(s.data(), length, what);
        return s;
    }
    nlohmann::json get_scalar(GgufValueType type, const char* what) {
        switch (type) {
            case GgufValueType::uint8: return get<uint8_t>(what);
            case GgufValueType::int8: return get<int8_t>(what);
            case GgufValueType::uint16: return get<uint16_t>(what);
            case GgufValueType::int16: return get<int16_t>(what);
            case GgufValueType::uint32: return get<uint32_t>(what);
            case GgufValueType::int32: return get<int32_t>(what);
            case GgufValueType::float32: return get<float>(what);
            case GgufValueType::boolean: return get<int8_t>(what) != 0;
            case GgufValueType::string: return get_string(what);
            case GgufValueType::uint64: return get<uint64_t>(what);
            case GgufValueType::int64: return get<int64_t>(what);
            case GgufValueType::float64: return get<double>(what);
            case GgufValueType::array: break;
        }
        throw Error("GGUF file " + path_ + " has a nested array, which GGUF does not allow");
    }

private:
    const std::string& path_;
    std::ifstream& file_;
    uint64_t size_;
    uint64_t position_ = 0;
};

}  // namespace

const char* ggml_type_name(GgmlType type) {
    switch (type) {
        case GgmlType::f32: return "F32";
        case GgmlType::f16: return "F16";
        case GgmlType::q8_0: return "Q8_0";
        case GgmlType::tq1_0: return "TQ1_0";
        case GgmlType::tq2_0: return "TQ2_0";
    }
    return "?";
}

int64_t ggml_block_size(GgmlType type) {
    switch (type) {
        case GgmlType::f32:
        case GgmlType::f16: return 1;
        case GgmlType::q8_0: return 32;
        case GgmlType::tq1_0:
        case GgmlType::tq2_0: return 256;
    }
    return 1;
}

size_t ggml_block_bytes(GgmlType type) {
    switch (type) {
        case GgmlType::f32: return 4;
        case GgmlType::f16: return 2;
        case GgmlType::q8_0: return 34;   // fp16 d, 32 x int8
        case GgmlType::tq1_0: return 54;  // 48 + 4 bytes of base-3 trits, fp16 d
        case GgmlType::tq2_0: return 66;  // 64 bytes of 2-bit codes, fp16 d
    }
    return 0;
}

size_t ggml_tensor_bytes(GgmlType type, const std::vector<int64_t>& ne) {
    require(!ne.empty() && ne[0] % ggml_block_size(type) == 0,
            std::string("gguf: a ") + ggml_type_name(type) + " tensor needs rows that are a multiple of " +
                std::to_string(ggml_block_size(type)) + " elements");
    size_t bytes = static_cast<size_t>(ne[0] / ggml_block_size(type)) * ggml_block_bytes(type);
    for (size_t d = 1; d < ne.size(); ++d) bytes *= static_cast<size_t>(ne[d]);
    return bytes;
}

// ---- GgufWriter ---------------------------------------------------------------------------

// Lookups are hashed: a linear search per key or tensor made large files quadratic to build.
void GgufWriter::set(const std::string& key, GgufValue value) {
    const auto [place, added] = metadata_index_.emplace(key, metadata_.size());
    if (!added) {
        metadata_[place->second].second = std::move(value);
        return;
    }
    metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::set_u32(const std::string& key, uint32_t value) { set(key, {GgufValueType::uint32, {}, value}); }
void GgufWriter::set_f32(const std::string& key, float value) { set(key, {GgufValueType::float32, {}, value}); }
void GgufWriter::set_bool(const std::string& key, bool value) { set(key, {GgufValueType::boolean, {}, value}); }
void GgufWriter::set_string(const std::string& key, const std::string& value) {
    set(key, {GgufValueType::string, {}, value});
}
void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& values) {
    set(key, {GgufValueType::array, GgufValueType::string, nlohmann::json(values)});
}
void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& values) {
    set(key, {GgufValueType::array, GgufValueType::float32, nlohmann::json(values)});
}
void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& values) {
    set(key, {GgufValueType::array, GgufValueType::int32, nlohmann::json(values)});
}
void GgufWriter::set_bytes(const std::string& key, const std::string& bytes) {
    nlohmann::json array = nlohmann::json::array();
    for (char byte : bytes) array.push_back(static_cast<uint8_t>(byte));
    set(key, {GgufValueType::array, GgufValueType::uint8, std::move(array)});
}

void GgufWriter::add_tensor(GgufTensor tensor) {
    require(!tensor.name.empty() && tensor.name.size() < 64, "gguf: tensor name '" + tensor.name + "' must have 1 to 63 characters");
    require(tensor.data.size() == ggml_tensor_bytes(tensor.type, tensor.ne),
            "gguf: tensor " + tensor.name + " has " + std::to_string(tensor.data.size()) + " bytes, its shape needs " +
                std::to_string(ggml_tensor_bytes(tensor.type, tensor.ne)));
    require(tensor_names_.insert(tensor.name).second, "gguf: duplicate tensor " + tensor.name);
    tensors_.push_back(std::move(tensor));
}

void GgufWriter::write(const std::string& path) const {
    ByteSink header;
    header.put_bytes(kMagic, sizeof kMagic);
    header.put<uint32_t>(kVersion);
    header.put<int64_t>(static_cast<int64_t>(tensors_.size()));
    header.put<int64_t>(static_cast<int64_t>(metadata_.size() + 2));
    header.put_string("general.alignment");
    header.put<int32_t>(static_cast<int32_t>(GgufValueType::uint32));
    header.put<uint32_t>(static_cast<uint32_t>(kAlignment));
    // The checksum's slot holds zero while the CRC is computed, then the CRC.
    header.put_string(kChecksumKey);
    header.put<int32_t>(static_cast<int32_t>(GgufValueType::uint32));
    const size_t checksum_slot = header.size();
    header.put<uint32_t>(0);
    for (const auto& [key, value] : metadata_) {
        require(key != "general.alignment" && key != kChecksumKey, "gguf: " + key + " is written by the writer itself");
        header.put_string(key);
        header.put<int32_t>(static_cast<int32_t>(value.type));
        if (value.type == GgufValueType::array) {
            header.put<int32_t>(static_cast<int32_t>(value.element_type));
            header.put<uint64_t>(value.value.size());
            for (const auto& element : value.value) put_scalar(header, value.element_type, element);
        } else {
            put_scalar(header, value.type, value.value);
        }
    }
    uint64_t offset = 0;
    for (const GgufTensor& tensor : tensors_) {
        header.put_string(tensor.name);
        header.put<uint32_t>(static_cast<uint32_t>(tensor.ne.size()));
        for (int64_t n : tensor.ne) header.put<int64_t>(n);
        header.put<int32_t>(static_cast<int32_t>(tensor.type));
        header.put<uint64_t>(offset);
        offset += pad_to(tensor.data.size(), kAlignment);
    }
    header.pad(kAlignment);

    const std::string padding(kAlignment, '\0');
    uint32_t crc = crc32_update(0, header.bytes().data(), header.size());
    for (const GgufTensor& tensor : tensors_) {
        crc = crc32_update(crc, tensor.data.data(), tensor.data.size());
        crc = crc32_update(crc, padding.data(), pad_to(tensor.data.size(), kAlignment) - tensor.data.size());
    }
    header.overwrite(checksum_slot, &crc, sizeof crc);

    AtomicFileWriter file(path);
    file.write(header.bytes().data(), header.bytes().size());
    for (const GgufTensor& tensor : tensors_) {
        file.write(tensor.data.data(), tensor.data.size());
        file.write(padding.data(), pad_to(tensor.data.size(), kAlignment) - tensor.data.size());
    }
    file.commit();
}

// ---- GgufReader ---------------------------------------------------------------------------

namespace {

// CRC-32 of the whole file with the 4 bytes at slot read as zero.
uint32_t file_crc32_with_zeroed_slot(const std::string& path, std::ifstream& file, uint64_t size, uint64_t slot) {
    file.clear();
    file.seekg(0);
    std::vector<char> chunk(size_t{1} << 20);
    uint32_t crc = 0;
    for (uint64_t at = 0; at < size;) {
        const size_t bytes = static_cast<size_t>(std::min<uint64_t>(chunk.size(), size - at));
        file.read(chunk.data(), static_cast<std::streamsize>(bytes));
        require(file.good(), "cannot read GGUF file " + path);
        for (uint64_t i = std::max(slot, at); i < std::min(slot + 4, at + bytes); ++i) chunk[i - at] = 0;
        crc = crc32_update(crc, chunk.data(), bytes);
        at += bytes;
    }
    return crc;
}

}  // namespace

GgufReader::GgufReader(const std::string& path) : path_(path) {
    std::error_code error;
    require(std::filesystem::is_regular_file(path, error), "cannot read GGUF file " + path + ": not a regular file");
    const uint64_t size = std::filesystem::file_size(path, error);
    require(!error, "cannot open GGUF file " + path + ": " + error.message());
    std::ifstream file(path, std::ios::binary);
    require(file.good(), "cannot open GGUF file " + path);
    Cursor in(path_, file, size);

    char magic[4];
    in.read(magic, 4, "the header");
    require(std::memcmp(magic, kMagic, 4) == 0, "not a GGUF file (wrong magic): " + path);
    const uint32_t version = in.get<uint32_t>("the header");
    require(version == kVersion, "GGUF file " + path + " has version " + std::to_string(version) + "; dqt reads version 3");
    const int64_t tensor_count = in.get<int64_t>("the header");
    const int64_t metadata_count = in.get<int64_t>("the header");
    // Every entry takes at least 8 (name length) + a few bytes: a count beyond that is corrupt.
    require(tensor_count >= 0 && static_cast<uint64_t>(tensor_count) <= in.remaining() / 24 && metadata_count >= 0 &&
                static_cast<uint64_t>(metadata_count) <= in.remaining() / 12,
            "GGUF file " + path + " is corrupt: impossible tensor or metadata count");

    uint64_t alignment = kAlignment;
    std::optional<uint64_t> checksum_slot;  // file offset of dqt.file_crc32's value
    for (int64_t k = 0; k < metadata_count; ++k) {
        std::string key = in.get_string("a metadata key");
        require(metadata_index_.emplace(key, metadata_.size()).second,
                "GGUF file " + path + " has the metadata key " + quote_untrusted(key) + " twice");
        const int32_t raw_type = in.get<int32_t>("a metadata value");
        require(known_value_type(raw_type), "GGUF file " + path + ": metadata " + quote_untrusted(key) + " has unknown type " +
                                                std::to_string(raw_type));
        if (key == kChecksumKey) {
            require(raw_type == static_cast<int32_t>(GgufValueType::uint32),
                    "GGUF file " + path + ": " + quote_untrusted(key) + " must be a u32");
            checksum_slot = in.position();
        }
        GgufValue value;
        value.type = static_cast<GgufValueType>(raw_type);
        if (value.type == GgufValueType::array) {
            const int32_t element = in.get<int32_t>("a metadata array");
            require(known_value_type(element) && element != static_cast<int32_t>(GgufValueType::array),
                    "GGUF file " + path + ": metadata " + quote_untrusted(key) + " has an unknown array element type");
            value.element_type = static_cast<GgufValueType>(element);
            const uint64_t count = in.get<uint64_t>("a metadata array");
            require(count <= in.remaining() / scalar_size(value.element_type),
                    "GGUF file " + path + " is truncated: metadata array " + quote_untrusted(key) + " runs past its end");
            value.value = nlohmann::json::array();
            for (uint64_t i = 0; i < count; ++i) value.value.push_back(in.get_scalar(value.element_type, "a metadata array"));
        } else {
            value.value = in.get_scalar(value.type, "a metadata value");
        }
        if (key == "general.alignment") {
            require(value.type == GgufValueType::uint32, "GGUF file " + path + ": general.alignment must be a u32");
            alignment = value.value.get<uint32_t>();
            require(alignment > 0 && (alignment & (alignment - 1)) == 0,
                    "GGUF file " + path + ": general.alignment must be a power of two");
        }
        metadata_.emplace_back(std::move(key), std::move(value));
    }

    for (int64_t t = 0; t < tensor_count; ++t) {
        TensorInfo info;
        info.name = in.get_string("a tensor name");
        require(tensor_index_.emplace(info.name, tensors_.size()).second,
                "GGUF file " + path + " has the tensor " + quote_untrusted(info.name) + " twice");
        const uint32_t dims = in.get<uint32_t>("a tensor shape");
        require(dims >= 1 && dims <= 4, "GGUF file " + path + ": tensor " + quote_untrusted(info.name) + " has " + std::to_string(dims) +
                                            " dimensions (1 to 4 allowed)");
        for (uint32_t d = 0; d < dims; ++d) {
            const int64_t n = in.get<int64_t>("a tensor shape");
            require(n >= 0 && n < (int64_t{1} << 40), "GGUF file " + path + ": tensor " + quote_untrusted(info.name) + " has an impossible shape");
            info.ne.push_back(n);
        }
        const int32_t type = in.get<int32_t>("a tensor type");
        switch (static_cast<GgmlType>(type)) {
            case GgmlType::f32:
            case GgmlType::f16:
            case GgmlType::q8_0:
            case GgmlType::tq1_0:
            case GgmlType::tq2_0: break;
            default:
                throw Error("GGUF file " + path + ": tensor " + quote_untrusted(info.name) + " has type " + std::to_string(type) +
                            ", which dqt does not read (it reads F32, F16, Q8_0, TQ1_0 and TQ2_0: llama-quantize converts to those)");
        }
        info.type = static_cast<GgmlType>(type);
        require(info.ne[0] % ggml_block_size(info.type) == 0,
                "GGUF file " + path + ": tensor " + quote_untrusted(info.name) + " has rows of " + std::to_string(info.ne[0]) +
                    " elements, not a multiple of its " + ggml_type_name(info.type) + " block");
        info.bytes = ggml_tensor_bytes(info.type, info.ne);
        info.offset = in.get<uint64_t>("a tensor offset");
        tensors_.push_back(std::move(info));
    }
    const uint64_t data_start = pad_to(in.position(), alignment);
    uint64_t expected = 0;
    for (TensorInfo& info : tensors_) {
        require(info.offset == expected, "GGUF file " + path + ": tensor " + quote_untrusted(info.name) + " is at offset " +
                                             std::to_string(info.offset) + ", expected " + std::to_string(expected));
        expected += pad_to(info.bytes, alignment);
        info.offset += data_start;
        require(info.offset + info.bytes <= size,
                "GGUF file " + path + " is truncated: the data of tensor " + quote_untrusted(info.name) + " runs past its end");
    }
    if (checksum_slot) {
        const uint32_t stored = find(kChecksumKey)->value.get<uint32_t>();
        require(file_crc32_with_zeroed_slot(path, file, size, *checksum_slot) == stored,
                "GGUF file " + path + ": checksum mismatch: file is corrupt");
    }
}

const GgufValue* GgufReader::find(const std::string& key) const {
    const auto it = metadata_index_.find(key);
    return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufReader::TensorInfo* GgufReader::find_tensor(const std::string& name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

const GgufValue& typed(const GgufReader& reader, const std::string& key, GgufValueType type, const char* type_name) {
    const GgufValue* value = reader.find(key);
    require(value != nullptr, "GGUF file " + reader.path() + " lacks the metadata key " + quote_untrusted(key));
    require(value->type == type, "GGUF file " + reader.path() + ": metadata " + quote_untrusted(key) + " is not a " + type_name);
    return *value;
}

}  // namespace

uint32_t GgufReader::u32(const std::string& key) const {
    return typed(*this, key, GgufValueType::uint32, "u32").value.get<uint32_t>();
}
float GgufReader::f32(const std::string& key) const {
    return typed(*this, key, GgufValueType::float32, "f32").value.get<float>();
}
std::string GgufReader::string(const std::string& key) const {
    return typed(*this, key, GgufValueType::string, "string").value.get<std::string>();
}

std::vector<uint8_t> GgufReader::read(const TensorInfo& tensor) const {
    std::vector<uint8_t> data(tensor.bytes);
    read_into(tensor, data.data());
    return data;
}

void GgufReader::read_into(const TensorInfo& tensor, void* out, size_t bytes) const {
    require(bytes <= tensor.bytes, "GGUF file " + path_ + ": a read past the end of tensor " + quote_untrusted(tensor.name));
    std::ifstream file(path_, std::ios::binary);
    require(file.good(), "cannot open GGUF file " + path_);
    file.seekg(static_cast<std::streamoff>(tensor.offset));
    file.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
    require(file.good(), "GGUF file " + path_ + " is truncated: cannot read tensor " + quote_untrusted(tensor.name));
}

void GgufReader::read_into(const TensorInfo& tensor, void* out) const { read_into(tensor, out, tensor.bytes); }

bool is_gguf_file(const std::string& path) {
    std::error_code error;  // not opened unless regular: opening a FIFO waits for a writer
    if (!std::filesystem::is_regular_file(path, error)) return false;
    std::ifstream file(path, std::ios::binary);
    char magic[4] = {};
    file.read(magic, 4);
    return file.good() && std::memcmp(magic, kMagic, 4) == 0;
}

}  // namespace dqt
