#pragma once
// Token shard files: a tokenized split, memory-mapped for reading.
//
// Layout (little-endian): a 64-byte header, then token_count tokens of bytes_per_token bytes
// each (2 when vocab_size <= 65536, else 4), unsigned.
//   0  char[8] magic "DQTSHARD"      8  u32 version (1)       12 u32 bytes_per_token
//  16  u32 vocab_size               20  u32 zero             24 u64 token_count
//  32  u64 source_bytes (UTF-8 bytes of the encoded text: bits per byte = nats / ln2 / bytes per token)
//  40  u32 CRC-32 of the token payload   44..59 zero         60 u32 CRC-32 of header bytes [0, 60)
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace dqt {

class AtomicFileWriter;

// Writes a shard a piece at a time (a corpus larger than memory is tokenized one batch of
// documents at a time), atomically (io/atomic_file.h): nothing appears at path before
// commit(), and a writer destroyed without it, or any failure (including a token outside
// [0, vocab_size)), leaves nothing there.
class ShardWriter {
public:
    ShardWriter(const std::string& path, int vocab_size);
    ~ShardWriter();
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;

    void append(std::span<const int32_t> tokens);
    // source_bytes: UTF-8 bytes of the text the tokens encode. Writes the header and renames.
    void commit(uint64_t source_bytes);
    uint64_t token_count() const { return token_count_; }

private:
    std::string path_;
    std::unique_ptr<AtomicFileWriter> file_;
    int vocab_size_;
    int bytes_per_token_;
    uint64_t token_count_ = 0;
    uint32_t payload_crc_ = 0;
};

// A whole shard in one call (ShardWriter).
void write_shard(const std::string& path, std::span<const int32_t> tokens, int vocab_size, uint64_t source_bytes);

// A read-only, validated, memory-mapped shard. Opening checks magic, version, sizes and both
// checksums, and throws dqt::Error naming the path and the fix on any mismatch.
class Shard {
public:
    explicit Shard(const std::string& path);
    ~Shard();
    Shard(Shard&& other) noexcept;
    Shard& operator=(Shard&& other) noexcept;
    Shard(const Shard&) = delete;
    Shard& operator=(const Shard&) = delete;

    size_t token_count() const { return token_count_; }
    int vocab_size() const { return vocab_size_; }
    uint64_t source_bytes() const { return source_bytes_; }
    const std::string& path() const { return path_; }

    // Token i, for i < token_count() (unchecked: the hot path).
    int32_t token(size_t i) const {
        return bytes_per_token_ == 2 ? static_cast<const uint16_t*>(payload_)[i]
                                     : static_cast<const int32_t*>(payload_)[i];
    }
    // out[0, count) = tokens [offset, offset + count); the range must lie inside the shard.
    void read(size_t offset, size_t count, int32_t* out) const;

private:
    void unmap();

    std::string path_;
    void* map_ = nullptr;  // whole file
    size_t map_bytes_ = 0;
    const void* payload_ = nullptr;  // (token_count_) of uint16 or int32, after the header
    size_t token_count_ = 0;
    int bytes_per_token_ = 2;
    int vocab_size_ = 0;
    uint64_t source_bytes_ = 0;
};

}  // namespace dqt
