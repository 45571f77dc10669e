#include "io/file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"

namespace dqt {

namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;  // of a checksum pass

}  // namespace

FileReader::FileReader(const std::string& path, const std::string& what) : label_(what + " " + path) {
    // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer;
    // reads of a regular file ignore it.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw Error("cannot open " + label_ + ": " + std::strerror(errno));
    struct stat info {};
    const bool stated = ::fstat(fd_, &info) == 0;
    if (!stated || !S_ISREG(info.st_mode)) {
        const std::string reason = stated ? "not a regular file" : std::strerror(errno);
        ::close(fd_);
        throw Error("cannot read " + label_ + ": " + reason);
    }
    size_ = static_cast<uint64_t>(info.st_size);
}

FileReader::~FileReader() {
    if (fd_ >= 0) ::close(fd_);
}

void FileReader::read_at(uint64_t offset, void* out, size_t count) const {
    if (offset > size_ || count > size_ - offset)
        throw Error("cannot read " + label_ + ": bytes " + std::to_string(offset) + " to " +
                    std::to_string(offset + count) + " lie past its end (" + std::to_string(size_) + " bytes)");
    char* at = static_cast<char*>(out);
    while (count > 0) {
        const ssize_t done = ::pread(fd_, at, count, static_cast<off_t>(offset));
        if (done < 0 && errno == EINTR) continue;
        if (done < 0) throw Error("cannot read " + label_ + ": " + std::strerror(errno));
        if (done == 0) throw Error("cannot read " + label_ + ": it shrank while being read");
        at += done;
        offset += static_cast<uint64_t>(done);
        count -= static_cast<size_t>(done);
    }
}

uint32_t FileReader::crc32_of(uint64_t offset, uint64_t count) const {
    std::vector<char> chunk(static_cast<size_t>(std::min<uint64_t>(count, kChunkBytes)));
    uint32_t crc = 0;
    while (count > 0) {
        const size_t piece = static_cast<size_t>(std::min<uint64_t>(count, chunk.size()));
        read_at(offset, chunk.data(), piece);
        crc = crc32_update(crc, chunk.data(), piece);
        offset += piece;
        count -= piece;
    }
    return crc;
}

}  // namespace dqt
