#pragma once
// A file read in place, piece by piece (pread): what a reader needs of a large file without
// holding all of it in memory (checkpoint.h keeps only the tensors the caller asks for).
#include <cstddef>
#include <cstdint>
#include <string>

namespace dqt {

class FileReader {
public:
    // dqt::Error "cannot open <what> <path>: <reason>".
    FileReader(const std::string& path, const std::string& what);
    ~FileReader();
    FileReader(const FileReader&) = delete;
    FileReader& operator=(const FileReader&) = delete;

    uint64_t size() const { return size_; }
    // Reads bytes [offset, offset + count), which must lie inside the file; dqt::Error otherwise
    // or when the read fails.
    void read_at(uint64_t offset, void* out, size_t count) const;
    // CRC-32 (core/checksum.h) of bytes [offset, offset + count), read in bounded chunks.
    uint32_t crc32_of(uint64_t offset, uint64_t count) const;

private:
    std::string label_;  // "<what> <path>" for messages
    int fd_ = -1;
    uint64_t size_ = 0;
};

}  // namespace dqt
