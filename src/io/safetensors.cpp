#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/float16.h"
#include "io/atomic_file.h"

namespace dqt {

static_assert(std::endian::native == std::endian::little, "tensor data is copied as stored (little endian)");

namespace {

using nlohmann::json;

constexpr size_t kMaxDimensions = 16;

// Bytes per element of a safetensors dtype; 0 when unknown.
size_t element_bytes(const std::string& dtype) {
    static const std::map<std::string, size_t> sizes = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I64", 8}, {"U64", 8},
        {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},  {"I8", 1},      {"U8", 1},      {"BOOL", 1},
    };
    const auto found = sizes.find(dtype);
    return found == sizes.end() ? 0 : found->second;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path)
    : path_(path), file_(std::make_unique<FileReader>(path, "safetensors file")) {
    const std::string where = "safetensors file " + path + ": ";
    const uint64_t size = file_->size();
    require(size >= 8, where + "truncated (" + std::to_string(size) + " bytes, shorter than the header length)");
    uint8_t prefix[8];
    file_->read_at(0, prefix, sizeof prefix);
    uint64_t header_bytes = 0;
    for (int i = 0; i < 8; ++i) header_bytes |= uint64_t{prefix[i]} << (8 * i);
    require(header_bytes <= kSafetensorsMaxHeader,
            where + "header length " + std::to_string(header_bytes) + " is over the limit of " +
                std::to_string(kSafetensorsMaxHeader) + " bytes (not a safetensors file?)");
    require(header_bytes <= size - 8, where + "truncated (a header of " + std::to_string(header_bytes) +
                                          " bytes does not fit in the " + std::to_string(size) + "-byte file)");
    data_start_ = 8 + header_bytes;
    const uint64_t data_bytes = size - data_start_;

    std::string text(static_cast<size_t>(header_bytes), '\0');
    file_->read_at(8, text.data(), text.size());
    json header = json::parse(text, nullptr, false);
    require(!header.is_discarded() && header.is_object(), where + "header is not a JSON object (not a safetensors file?)");

    std::vector<std::pair<uint64_t, std::string>> by_offset;
    for (auto item = header.begin(); item != header.end(); ++item) {
        const std::string& name = item.key();
        if (name == "__metadata__") {
            require(item->is_object(), where + "__metadata__ is not an object");
            for (auto field = item->begin(); field != item->end(); ++field) {
                require(field->is_string(), where + "__metadata__ value " + quote_untrusted(field.key()) +
                                                " is not a string");
                metadata_[field.key()] = field->get<std::string>();
            }
            continue;
        }
        const std::string bad = where + "tensor " + quote_untrusted(name) + ": ";
        require(!name.empty(), where + "a tensor has an empty name");
        require(item->is_object() && item->contains("dtype") && item->contains("shape") &&
                    item->contains("data_offsets"),
                bad + "lacks \"dtype\", \"shape\" or \"data_offsets\"");
        const json& dtype = item->at("dtype");
        const json& shape = item->at("shape");
        const json& offsets = item->at("data_offsets");
        require(dtype.is_string(), bad + "dtype is not a string");
        Entry entry;
        entry.dtype = dtype.get<std::string>();
        const size_t element_size = element_bytes(entry.dtype);
        require(element_size != 0, bad + "unknown dtype " + quote_untrusted(entry.dtype));
        require(shape.is_array() && shape.size() <= kMaxDimensions,
                bad + "shape is not a list of at most " + std::to_string(kMaxDimensions) + " dimensions");
        uint64_t expected = element_size;
        for (const json& dim : shape) {
            require(dim.is_number_unsigned() && dim.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
                    bad + "shape is not a list of non-negative integers");
            require(!__builtin_mul_overflow(expected, dim.get<uint64_t>(), &expected) &&
                        expected <= static_cast<uint64_t>(INT64_MAX),
                    bad + "shape's byte count overflows");
            entry.shape.push_back(dim.get<int64_t>());
        }
        require(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                    offsets[1].is_number_unsigned(),
                bad + "data_offsets is not a pair of non-negative integers");
        entry.begin = offsets[0].get<uint64_t>();
        entry.end = offsets[1].get<uint64_t>();
        require(entry.begin <= entry.end && entry.end <= data_bytes,
                bad + "data [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                    ") lies outside the file's " + std::to_string(data_bytes) + " data bytes (truncated?)");
        require(entry.end - entry.begin == expected,
                bad + "holds " + std::to_string(entry.end - entry.begin) + " bytes, its shape and dtype need " +
                    std::to_string(expected));
        by_offset.emplace_back(entry.begin, name);
        tensors_.emplace(name, std::move(entry));
    }
    // The tensors tile the data area exactly, as the reference implementation requires: no
    // overlap (two tensors sharing bytes), no gap, nothing after the last.
    std::sort(by_offset.begin(), by_offset.end(), [&](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : tensors_.at(a.second).end < tensors_.at(b.second).end;
    });
    uint64_t covered = 0;
    for (const auto& [begin, name] : by_offset) {
        require(begin == covered, where + "tensor " + quote_untrusted(name) + " starts at data byte " +
                                      std::to_string(begin) + ", expected " + std::to_string(covered) +
                                      " (tensors overlap or leave a gap)");
        covered = tensors_.at(name).end;
        names_.push_back(name);
    }
    require(covered == data_bytes, where + "the tensors cover " + std::to_string(covered) + " of the " +
                                       std::to_string(data_bytes) + " data bytes");
}

const SafetensorsReader::Entry& SafetensorsReader::entry(const std::string& name) const {
    const auto found = tensors_.find(name);
    require(found != tensors_.end(), "safetensors file " + path_ + ": no tensor named " + quote_untrusted(name));
    return found->second;
}

const std::vector<int64_t>& SafetensorsReader::shape(const std::string& name) const { return entry(name).shape; }

const std::string& SafetensorsReader::dtype(const std::string& name) const { return entry(name).dtype; }

int64_t SafetensorsReader::element_count(const std::string& name) const {
    const Entry& found = entry(name);
    return static_cast<int64_t>((found.end - found.begin) / element_bytes(found.dtype));
}

std::vector<uint8_t> SafetensorsReader::read_bytes(const Entry& found) const {
    std::vector<uint8_t> bytes(found.end - found.begin);
    if (!bytes.empty()) file_->read_at(data_start_ + found.begin, bytes.data(), bytes.size());
    return bytes;
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
    const Entry& found = entry(name);
    const std::string& dtype = found.dtype;
    require(dtype == "F32" || dtype == "F64" || dtype == "F16" || dtype == "BF16",
            "safetensors file " + path_ + ": tensor " + quote_untrusted(name) + " has dtype " + dtype +
                ", not a floating-point one");
    const std::vector<uint8_t> bytes = read_bytes(found);
    const size_t count = bytes.size() / element_bytes(dtype);
    std::vector<float> out(count);
    if (count == 0) return out;  // no copy from an empty vector's null data
    if (dtype == "F32") {
        std::memcpy(out.data(), bytes.data(), bytes.size());
    } else if (dtype == "F64") {
        for (size_t i = 0; i < count; ++i) {
            double value;
            std::memcpy(&value, bytes.data() + 8 * i, 8);
            // Beyond fp32's range a cast is undefined: such values become infinities, as IEEE rounds them.
            constexpr float kInfinity = std::numeric_limits<float>::infinity();
            out[i] = std::fabs(value) > std::numeric_limits<float>::max() ? (value > 0 ? kInfinity : -kInfinity)
                                                                         : static_cast<float>(value);
        }
    } else if (dtype == "F16") {
        for (size_t i = 0; i < count; ++i) {
            Float16 value;
            std::memcpy(&value, bytes.data() + 2 * i, 2);
            out[i] = static_cast<float>(value);
        }
    } else {  // BF16: the top half of an fp32
        for (size_t i = 0; i < count; ++i) {
            uint16_t value;
            std::memcpy(&value, bytes.data() + 2 * i, 2);
            out[i] = std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
        }
    }
    return out;
}

std::vector<int32_t> SafetensorsReader::read_i32(const std::string& name) const {
    const Entry& found = entry(name);
    require(found.dtype == "I32", "safetensors file " + path_ + ": tensor " + quote_untrusted(name) + " has dtype " +
                                      found.dtype + ", expected I32");
    const std::vector<uint8_t> bytes = read_bytes(found);
    std::vector<int32_t> out(bytes.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

std::vector<int8_t> SafetensorsReader::read_i8(const std::string& name) const {
    const Entry& found = entry(name);
    require(found.dtype == "I8", "safetensors file " + path_ + ": tensor " + quote_untrusted(name) + " has dtype " +
                                     found.dtype + ", expected I8");
    const std::vector<uint8_t> bytes = read_bytes(found);
    return std::vector<int8_t>(bytes.begin(), bytes.end());
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::vector<uint64_t> sizes;
    uint64_t offset = 0;
    for (const SafetensorsTensor& tensor : tensors) {
        require(tensor.dtype == "F32" || tensor.dtype == "I8", "write_safetensors: dtype " + tensor.dtype + " of " +
                                                                   tensor.name + " is not written (F32 or I8)");
        require(!tensor.name.empty() && tensor.name != "__metadata__" && !header.contains(tensor.name),
                "write_safetensors: tensor name '" + tensor.name + "' is empty, reserved or repeated");
        uint64_t bytes = element_bytes(tensor.dtype);
        for (int64_t dim : tensor.shape) bytes *= static_cast<uint64_t>(dim);
        header[tensor.name] = {{"dtype", tensor.dtype}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + bytes}}};
        sizes.push_back(bytes);
        offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    uint8_t prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    AtomicFileWriter out(path, PageCache::bypass);
    out.write(prefix, sizeof prefix);
    out.write(text.data(), text.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        const std::string data = tensors[i].bytes();
        require(data.size() == sizes[i], "write_safetensors: " + tensors[i].name + " gave " + std::to_string(data.size()) +
                                             " bytes where its shape needs " + std::to_string(sizes[i]));
        out.write(data.data(), data.size());
    }
    out.commit();
}

}  // namespace dqt
