#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"
#include "io/atomic_file.h"

namespace dqt {
namespace {

static_assert(std::endian::native == std::endian::little, "shard files are little-endian");

constexpr char kShardMagic[8] = {'D', 'Q', 'T', 'S', 'H', 'A', 'R', 'D'};
constexpr uint32_t kShardVersion = 1;

struct ShardHeader {
    char magic[8];
    uint32_t version;
    uint32_t bytes_per_token;
    uint32_t vocab_size;
    uint32_t zero0;
    uint64_t token_count;
    uint64_t source_bytes;
    uint32_t payload_crc;
    uint8_t zero1[16];
    uint32_t header_crc;  // over the 60 bytes before it
};
static_assert(sizeof(ShardHeader) == 64 && offsetof(ShardHeader, header_crc) == 60);

uint32_t header_crc_of(const ShardHeader& header) {
    return crc32_update(0, &header, offsetof(ShardHeader, header_crc));
}

int bytes_per_token_for(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

}  // namespace

ShardWriter::ShardWriter(const std::string& path, int vocab_size)
    : path_(path), vocab_size_(vocab_size), bytes_per_token_(bytes_per_token_for(vocab_size)) {
    require(vocab_size > 0, "shard " + path + ": vocabulary size must be positive");
    file_ = std::make_unique<AtomicFileWriter>(path);
    const ShardHeader placeholder{};  // written for real by commit()
    file_->write(&placeholder, sizeof placeholder);
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append(std::span<const int32_t> tokens) {
    std::vector<char> payload(tokens.size() * bytes_per_token_);  // (tokens) of uint16 or uint32
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= vocab_size_) {  // not require(): no message built per token
            throw Error("shard " + path_ + ": token " + std::to_string(tokens[i]) + " is outside the vocabulary of " +
                        std::to_string(vocab_size_));
        }
        if (bytes_per_token_ == 2) {
            const auto value = static_cast<uint16_t>(tokens[i]);
            std::memcpy(payload.data() + 2 * i, &value, 2);
        } else {
            const auto value = static_cast<uint32_t>(tokens[i]);
            std::memcpy(payload.data() + 4 * i, &value, 4);
        }
    }
    payload_crc_ = crc32_update(payload_crc_, payload.data(), payload.size());
    file_->write(payload.data(), payload.size());
    token_count_ += tokens.size();
}

void ShardWriter::commit(uint64_t source_bytes) {
    ShardHeader header{};
    std::memcpy(header.magic, kShardMagic, 8);
    header.version = kShardVersion;
    header.bytes_per_token = static_cast<uint32_t>(bytes_per_token_);
    header.vocab_size = static_cast<uint32_t>(vocab_size_);
    header.token_count = token_count_;
    header.source_bytes = source_bytes;
    header.payload_crc = payload_crc_;
    header.header_crc = header_crc_of(header);
    file_->rewrite(0, &header, sizeof header);
    file_->commit();
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, int vocab_size, uint64_t source_bytes) {
    ShardWriter writer(path, vocab_size);
    writer.append(tokens);
    writer.commit(source_bytes);
}

Shard::Shard(const std::string& path) : path_(path) {
    const std::string name = "shard " + path;
    const std::string fix = ": re-create it with `dqt data`";
    std::error_code ec;
    require(std::filesystem::exists(path, ec), name + " not found: run `dqt data` to create it");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
    require(fd >= 0, name + ": cannot open (" + std::strerror(errno) + "): check its permissions");
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        ::close(fd);
        throw Error(name + ": cannot stat (" + std::strerror(errno) + ")");
    }
    if (!S_ISREG(info.st_mode)) {
        ::close(fd);
        throw Error(name + ": not a regular file" + fix);
    }
    const auto file_bytes = static_cast<size_t>(info.st_size);
    if (file_bytes < sizeof(ShardHeader)) {
        char magic[8] = {};
        const bool has_magic = ::pread(fd, magic, 8, 0) == 8 && std::memcmp(magic, kShardMagic, 8) == 0;
        ::close(fd);
        require(has_magic, name + ": wrong magic (not a dqt shard file)");
        throw Error(name + ": truncated (" + std::to_string(file_bytes) + " bytes, shorter than the 64-byte header)" +
                    fix);
    }
    map_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);  // the mapping keeps the file open
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        throw Error(name + ": cannot map into memory (" + std::strerror(errno) + ")");
    }
    map_bytes_ = file_bytes;
    try {
        ShardHeader header;
        std::memcpy(&header, map_, sizeof header);
        require(std::memcmp(header.magic, kShardMagic, 8) == 0, name + ": wrong magic (not a dqt shard file)");
        require(header.header_crc == header_crc_of(header), name + ": header checksum mismatch (file corrupt)" + fix);
        require(header.version == kShardVersion, name + ": format version " + std::to_string(header.version) +
                                                     " is not supported (expected " + std::to_string(kShardVersion) +
                                                     ")" + fix);
        require(header.vocab_size > 0 && header.vocab_size <= INT32_MAX &&
                    header.bytes_per_token ==
                        static_cast<uint32_t>(bytes_per_token_for(static_cast<int>(header.vocab_size))),
                name + ": inconsistent header (vocabulary " + std::to_string(header.vocab_size) + ", " +
                    std::to_string(header.bytes_per_token) + " bytes per token)" + fix);
        const size_t held = (file_bytes - sizeof header) / header.bytes_per_token;
        require(held >= header.token_count, name + ": truncated (header says " + std::to_string(header.token_count) +
                                                " tokens, file holds " + std::to_string(held) + ")" + fix);
        const size_t payload_bytes = header.token_count * header.bytes_per_token;
        require(file_bytes == sizeof header + payload_bytes,
                name + ": " + std::to_string(file_bytes - sizeof header - payload_bytes) +
                    " unexpected bytes after the last token (file corrupt)" + fix);
        payload_ = static_cast<const char*>(map_) + sizeof header;
        require(crc32_update(0, payload_, payload_bytes) == header.payload_crc,
                name + ": checksum mismatch (file corrupt; re-run dqt data)");
        token_count_ = header.token_count;
        bytes_per_token_ = static_cast<int>(header.bytes_per_token);
        vocab_size_ = static_cast<int>(header.vocab_size);
        source_bytes_ = header.source_bytes;
        require(source_bytes_ > 0 || token_count_ == 0,
                name + ": header says its " + std::to_string(token_count_) + " tokens came from 0 bytes of text" + fix);
        // A checksum-valid file can still hold ids its vocabulary does not have (crafted, or
        // written by another program): the embedding lookup would read outside its table.
        for (size_t i = 0; i < token_count_; ++i) {
            const int32_t id = token(i);
            if (id < 0 || id >= vocab_size_)  // not require(): no message built per token
                throw Error(name + ": token " + std::to_string(static_cast<uint32_t>(id)) + " at position " +
                            std::to_string(i) + " is outside its vocabulary of " + std::to_string(vocab_size_) +
                            " (file corrupt or not written by dqt; re-run dqt data)");
        }
    } catch (...) {
        unmap();
        throw;
    }
}

Shard::~Shard() { unmap(); }

Shard::Shard(Shard&& other) noexcept { *this = std::move(other); }

Shard& Shard::operator=(Shard&& other) noexcept {
    if (this != &other) {
        unmap();
        path_ = std::move(other.path_);
        map_ = std::exchange(other.map_, nullptr);
        map_bytes_ = std::exchange(other.map_bytes_, 0);
        payload_ = std::exchange(other.payload_, nullptr);
        token_count_ = std::exchange(other.token_count_, 0);
        bytes_per_token_ = other.bytes_per_token_;
        vocab_size_ = other.vocab_size_;
        source_bytes_ = other.source_bytes_;
    }
    return *this;
}

void Shard::unmap() {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    map_ = nullptr;
    map_bytes_ = 0;
    payload_ = nullptr;
}

void Shard::read(size_t offset, size_t count, int32_t* out) const {
    if (offset > token_count_ || count > token_count_ - offset) {
        throw Error("shard " + path_ + ": read of tokens [" + std::to_string(offset) + ", " +
                    std::to_string(offset + count) + ") past its " + std::to_string(token_count_) + " tokens");
    }
    if (count == 0) return;  // an empty shard has no payload to copy from
    if (bytes_per_token_ == 4) {
        std::memcpy(out, static_cast<const int32_t*>(payload_) + offset, count * sizeof(int32_t));
        return;
    }
    const auto* tokens = static_cast<const uint16_t*>(payload_) + offset;
    for (size_t i = 0; i < count; ++i) out[i] = tokens[i];
}

}  // namespace dqt
