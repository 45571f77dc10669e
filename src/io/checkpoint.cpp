#include "io/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/checksum.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/file_reader.h"

namespace dqt {

using nlohmann::json;

namespace {

constexpr char kMagic[8] = {'D', 'Q', 'T', 'C', 'K', 'P', 'T', '\0'};
constexpr char kEndMagic[8] = {'D', 'Q', 'T', 'E', 'N', 'D', '\0', '\0'};
constexpr uint64_t kPrefixBytes = 8 + 4 + 8;  // magic, version, header length
constexpr uint64_t kTrailerBytes = 4 + 8;     // crc32, end magic
constexpr uint64_t kAlignment = 64;

uint64_t align_up(uint64_t value) { return (value + kAlignment - 1) / kAlignment * kAlignment; }

template <typename T>
void put_le(char* out, T value) {
    for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<char>(value >> (8 * i));
}

template <typename T>
T get_le(const char* in) {
    T value = 0;
    for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<unsigned char>(in[i])) << (8 * i);
    return value;
}

// Payload size of a tensor; false for a negative dimension or a size that overflows.
bool tensor_bytes(const std::vector<int64_t>& shape, size_t element_size, uint64_t& bytes) {
    uint64_t total = element_size;
    for (const int64_t dim : shape) {
        if (dim < 0 || __builtin_mul_overflow(total, static_cast<uint64_t>(dim), &total)) return false;
    }
    bytes = total;
    return true;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string text = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) text += ',';
        text += std::to_string(shape[i]);
    }
    return text + "]";
}

}  // namespace

size_t dtype_size(const std::string& dtype) {
    static const std::map<std::string, size_t> sizes = {
        {"f64", 8}, {"f32", 4}, {"f16", 2}, {"bf16", 2}, {"i64", 8}, {"u64", 8},
        {"i32", 4}, {"u32", 4}, {"i16", 2}, {"u16", 2},  {"i8", 1},  {"u8", 1},
    };
    const auto found = sizes.find(dtype);
    return found == sizes.end() ? 0 : found->second;
}

void save_checkpoint(const std::string& path, const json& meta, const std::vector<TensorView>& tensors) {
    const std::string where = "cannot save checkpoint " + path + ": ";
    // Everything is validated before the file is created, so a bad call leaves no trace.
    std::set<std::string> seen;
    std::vector<uint32_t> crcs;
    for (const TensorView& tensor : tensors) {
        require(!tensor.name.empty(), where + "a tensor has an empty name");
        require(seen.insert(tensor.name).second, where + "duplicate tensor name " + tensor.name);
        const size_t element_size = dtype_size(tensor.dtype);
        require(element_size != 0, where + "tensor " + tensor.name + " has unknown dtype '" + tensor.dtype + "'");
        uint64_t expected = 0;
        require(tensor_bytes(tensor.shape, element_size, expected) && expected == tensor.nbytes,
                where + "tensor " + tensor.name + " (" + tensor.dtype + " " + shape_text(tensor.shape) + ") has " +
                    std::to_string(tensor.nbytes) + " bytes, which does not match its shape");
        require(tensor.data != nullptr || tensor.nbytes == 0, where + "tensor " + tensor.name + " has no data");
        crcs.push_back(crc32_update(0, tensor.data, tensor.nbytes));
    }

    // Offsets are absolute and stored in the header, whose length depends on them: move the
    // payload start up until the header fits in front of it (two or three rounds).
    std::vector<uint64_t> offsets(tensors.size());
    std::string header;
    for (uint64_t data_start = 0;;) {
        json table = json::array();
        uint64_t end = data_start;
        for (size_t i = 0; i < tensors.size(); ++i) {
            offsets[i] = align_up(end);
            end = offsets[i] + tensors[i].nbytes;
            table.push_back({{"name", tensors[i].name},
                             {"dtype", tensors[i].dtype},
                             {"shape", tensors[i].shape},
                             {"offset", offsets[i]},
                             {"nbytes", static_cast<uint64_t>(tensors[i].nbytes)},
                             {"crc32", crcs[i]}});
        }
        try {
            header = json{{"meta", meta}, {"tensors", table}}.dump();
        } catch (const json::exception& error) {
            throw Error(where + "metadata cannot be written as JSON: " + error.what());
        }
        const uint64_t needed = align_up(kPrefixBytes + header.size());
        if (needed <= data_start) break;
        data_start = needed;
    }

    AtomicFileWriter writer(path, PageCache::bypass);
    uint32_t crc = 0;
    uint64_t position = 0;
    auto emit = [&](const void* data, size_t bytes) {
        writer.write(data, bytes);
        crc = crc32_update(crc, data, bytes);
        position += bytes;
    };
    char prefix[kPrefixBytes];
    std::memcpy(prefix, kMagic, sizeof kMagic);
    put_le<uint32_t>(prefix + 8, kCheckpointVersion);
    put_le<uint64_t>(prefix + 12, header.size());
    emit(prefix, sizeof prefix);
    emit(header.data(), header.size());
    static const char zeros[kAlignment] = {};
    for (size_t i = 0; i < tensors.size(); ++i) {
        emit(zeros, offsets[i] - position);
        emit(tensors[i].data, tensors[i].nbytes);
    }
    char trailer[kTrailerBytes];
    put_le<uint32_t>(trailer, crc);
    std::memcpy(trailer + 4, kEndMagic, sizeof kEndMagic);
    writer.write(trailer, sizeof trailer);
    writer.commit();
}

CheckpointReader::CheckpointReader(const std::string& path)
    : path_(path), file_(std::make_unique<FileReader>(path, "checkpoint file")) {
    const std::string where = "checkpoint " + path + ": ";
    const uint64_t size = file_->size();

    // A file shorter than the magic that matches its start is a cut-off checkpoint.
    char prefix[kPrefixBytes] = {};
    file_->read_at(0, prefix, static_cast<size_t>(std::min<uint64_t>(size, kPrefixBytes)));
    require(std::memcmp(prefix, kMagic, std::min<uint64_t>(size, sizeof kMagic)) == 0,
            where + "not a dqt checkpoint (wrong magic bytes)");
    require(size >= kPrefixBytes + kTrailerBytes,
            where + "truncated (" + std::to_string(size) + " bytes; the write was cut short)");
    const uint32_t version = get_le<uint32_t>(prefix + 8);
    require(version <= kCheckpointVersion, where + "written by a newer dqt (format version " + std::to_string(version) +
                                               ", this build reads up to " + std::to_string(kCheckpointVersion) +
                                               "): upgrade dqt");
    require(version >= 1, where + "invalid format version 0 (file is corrupt)");
    const uint64_t header_bytes = get_le<uint64_t>(prefix + 12);
    require(header_bytes <= size - kPrefixBytes - kTrailerBytes,
            where + "truncated (header of " + std::to_string(header_bytes) + " bytes does not fit in the " +
                std::to_string(size) + "-byte file)");
    const uint64_t body = size - kTrailerBytes;
    char trailer[kTrailerBytes];
    file_->read_at(body, trailer, kTrailerBytes);
    require(std::memcmp(trailer + 4, kEndMagic, sizeof kEndMagic) == 0,
            where + "truncated (end marker missing; the write was cut short)");
    // The whole file is checked once here, in bounded chunks; tensors are read when asked for.
    require(get_le<uint32_t>(trailer) == file_->crc32_of(0, body), where + "checksum mismatch: file is corrupt");

    std::string header_text(static_cast<size_t>(header_bytes), '\0');
    file_->read_at(kPrefixBytes, header_text.data(), header_text.size());
    json header = json::parse(header_text, nullptr, false);
    require(!header.is_discarded(), where + "header is not valid JSON");
    require(header.is_object() && header.contains("meta") && header.contains("tensors") &&
                header.at("tensors").is_array(),
            where + "header lacks \"meta\" or \"tensors\" (file is corrupt)");
    meta_ = std::move(header.at("meta"));

    // The checksum passed, so a bad table means a writer bug or a crafted file: still check
    // every field and range before it is used to index the file.
    for (const json& item : header.at("tensors")) {
        auto field = [&](const char* key) -> const json& {
            const auto found = item.find(key);
            require(found != item.end(), where + "tensor table entry lacks \"" + key + "\" (file is corrupt)");
            return *found;
        };
        require(field("name").is_string() && field("dtype").is_string() && field("shape").is_array() &&
                    field("offset").is_number_unsigned() && field("nbytes").is_number_unsigned() &&
                    field("crc32").is_number_unsigned(),
                where + "tensor table entry has a field of the wrong type (file is corrupt)");
        const std::string name = field("name").get<std::string>();
        const std::string bad = where + "tensor " + quote_untrusted(name) + ": ";
        require(!name.empty() && !tensors_.count(name), where + "empty or duplicate tensor name " + quote_untrusted(name));
        Entry entry;
        entry.dtype = field("dtype").get<std::string>();
        require(field("shape").size() <= 8, bad + "has more than 8 dimensions (file is corrupt)");
        for (const json& dim : field("shape")) {
            require(dim.is_number_unsigned(), bad + "shape is not a list of non-negative integers (file is corrupt)");
            entry.shape.push_back(dim.get<int64_t>());
        }
        entry.offset = field("offset").get<uint64_t>();
        entry.nbytes = field("nbytes").get<uint64_t>();
        const size_t element_size = dtype_size(entry.dtype);
        require(element_size != 0, bad + "unknown dtype " + quote_untrusted(entry.dtype) + " (written by a newer dqt?)");
        uint64_t expected = 0;
        require(tensor_bytes(entry.shape, element_size, expected) && expected == entry.nbytes,
                bad + "byte count does not match its shape (file is corrupt)");
        require(entry.offset % kAlignment == 0 && entry.offset >= kPrefixBytes + header_bytes &&
                    entry.offset <= body && entry.nbytes <= body - entry.offset,
                bad + "payload lies outside the data area (file is corrupt)");
        require(field("crc32").get<uint64_t>() <= UINT32_MAX, bad + "checksum out of range (file is corrupt)");
        entry.crc32 = static_cast<uint32_t>(field("crc32").get<uint64_t>());
        names_.push_back(name);
        tensors_.emplace(name, std::move(entry));
    }
}

const CheckpointReader::Entry& CheckpointReader::entry(const std::string& name) const {
    const auto found = tensors_.find(name);
    require(found != tensors_.end(),
            "checkpoint " + path_ + ": no tensor named " + name + " (config mismatch: written for another model?)");
    return found->second;
}

std::vector<int64_t> CheckpointReader::shape(const std::string& name) const { return entry(name).shape; }

std::string CheckpointReader::dtype(const std::string& name) const { return entry(name).dtype; }

void CheckpointReader::read(const std::string& name, const std::string& expected_dtype,
                            const std::vector<int64_t>& expected_shape, void* out, size_t out_nbytes) const {
    const Entry& found = entry(name);
    const std::string where = "checkpoint " + path_ + ": tensor " + name;
    require(found.dtype == expected_dtype, where + " has dtype " + found.dtype + ", this model expects " +
                                               expected_dtype + " (config mismatch)");
    require(found.shape == expected_shape, where + " has shape " + shape_text(found.shape) + ", this model expects " +
                                               shape_text(expected_shape) + " (config mismatch)");
    require(out_nbytes == found.nbytes, where + " has " + std::to_string(found.nbytes) +
                                            " bytes but the destination buffer has " + std::to_string(out_nbytes));
    if (found.nbytes == 0) return;
    file_->read_at(found.offset, out, found.nbytes);
    require(crc32_update(0, out, found.nbytes) == found.crc32, where + ": checksum mismatch (the file changed or is corrupt)");
}

}  // namespace dqt
