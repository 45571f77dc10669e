#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace dqt {

namespace {

// O_DIRECT transfers start and end on this boundary (the logical block size of every Linux
// file system is at most 4 KiB); the staging buffer holds 8 MiB of them.
constexpr size_t kDirectAlignment = 4096;
constexpr size_t kStagingBytes = size_t{8} << 20;

std::string errno_text() { return std::strerror(errno); }

// fsync of the directory makes the rename itself durable, not only the file's bytes.
void fsync_directory(const std::string& path) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw Error("cannot sync directory " + dir + " after writing " + path + ": " + errno_text());
    const int rc = ::fsync(fd);
    const int saved = errno;
    ::close(fd);
    // Some file systems cannot fsync a directory (EINVAL); the rename is still done.
    require(rc == 0 || saved == EINVAL,
            "cannot sync directory " + dir + " after writing " + path + ": " + std::strerror(saved));
}

// Removes "<path>.tmp.<pid>" files of processes that no longer exist: what a writer killed
// mid-write (kill -9, power loss) left behind, often a whole checkpoint's size. Files of live
// processes are another writer's work in progress and stay.
void remove_dead_writers_leftovers(const std::string& path) {
    const std::filesystem::path target(path);
    const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
    const std::string prefix = target.filename().string() + ".tmp.";
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
        const std::string name = entry.path().filename().string();
        if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string digits = name.substr(prefix.size());
        if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
        const pid_t pid = static_cast<pid_t>(std::stol(digits));
        if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
        std::filesystem::remove(entry.path(), error);  // best effort: a failure leaves it as it was
    }
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(const std::string& path, PageCache cache)
    : path_(path), temp_path_(path + ".tmp." + std::to_string(::getpid())) {
    // Said before the bytes are made: the rename at commit would refuse only after them.
    std::error_code error;
    require(!std::filesystem::is_directory(path, error),
            "cannot write " + path + ": it is a directory: give a file name inside it");
    remove_dead_writers_leftovers(path);
    const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    if (cache == PageCache::bypass) {
        fd_ = ::open(temp_path_.c_str(), flags | O_DIRECT, 0644);
        direct_ = fd_ >= 0;
    }
    if (fd_ < 0) fd_ = ::open(temp_path_.c_str(), flags, 0644);  // also: no O_DIRECT here (EINVAL)
    if (direct_) {
        staging_ = Buffer(MemCategory::scratch, kStagingBytes + kDirectAlignment);
        const auto address = reinterpret_cast<uintptr_t>(staging_.data());
        stage_ = reinterpret_cast<char*>((address + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment);
    }
    if (fd_ < 0) {
        const bool no_dir = errno == ENOENT;
        throw Error("cannot write " + path_ + ": " + errno_text() +
                    (no_dir ? " (does the directory exist?)" : ""));
    }
}

AtomicFileWriter::~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
    require(fd_ >= 0, "cannot write " + path_ + ": file already committed");
    if (!direct_) return write_all(data, bytes);
    const auto* cursor = static_cast<const char*>(data);
    while (bytes > 0) {
        const size_t piece = std::min(bytes, kStagingBytes - staged_);
        std::memcpy(stage_ + staged_, cursor, piece);
        staged_ += piece;
        cursor += piece;
        bytes -= piece;
        if (staged_ == kStagingBytes) flush_staged(false);
    }
}

void AtomicFileWriter::rewrite(uint64_t offset, const void* data, size_t bytes) {
    require(fd_ >= 0, "cannot write " + path_ + ": file already committed");
    require(!direct_, "cannot rewrite part of " + path_ + ": it is written around the page cache");
    const auto* cursor = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t done = ::pwrite(fd_, cursor, bytes, static_cast<off_t>(offset));
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) throw Error("cannot write " + path_ + ": " + (done < 0 ? errno_text() : "no progress"));
        cursor += done;
        offset += static_cast<uint64_t>(done);
        bytes -= static_cast<size_t>(done);
    }
}

void AtomicFileWriter::flush_staged(bool tail) {
    const size_t blocks = staged_ / kDirectAlignment * kDirectAlignment;
    if (blocks > 0) {
        const ssize_t done = ::write(fd_, stage_, blocks);
        if (done < 0 && errno == EINVAL) {
            // The file system took O_DIRECT at open but not this write: go through the cache.
            stop_bypassing();
            write_all(stage_, staged_);
            staged_ = 0;
            return;
        }
        if (done < 0 && errno != EINTR) throw Error("cannot write " + path_ + ": " + errno_text());
        // A short or interrupted direct write: the rest of the stage goes through the cache.
        const size_t written = done > 0 ? static_cast<size_t>(done) : 0;
        if (written < blocks) {
            stop_bypassing();
            write_all(stage_ + written, staged_ - written);
            staged_ = 0;
            return;
        }
        std::memmove(stage_, stage_ + blocks, staged_ - blocks);
        staged_ -= blocks;
    }
    if (tail && staged_ > 0) {
        stop_bypassing();  // O_DIRECT writes whole blocks only
        write_all(stage_, staged_);
        staged_ = 0;
    }
}

void AtomicFileWriter::stop_bypassing() {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0)
        throw Error("cannot write " + path_ + ": " + errno_text());
    direct_ = false;
}

void AtomicFileWriter::write_all(const void* data, size_t bytes) {
    const auto* cursor = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t done = ::write(fd_, cursor, bytes);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) throw Error("cannot write " + path_ + ": " + (done < 0 ? errno_text() : "no progress"));
        cursor += done;
        bytes -= static_cast<size_t>(done);
    }
}

void AtomicFileWriter::commit() {
    require(fd_ >= 0, "cannot write " + path_ + ": file already committed");
    if (direct_) flush_staged(true);
    // Each call's errno is read right after it: a message argument of require() may be
    // evaluated before its condition, and would then report a stale errno ("Success").
    // Delayed write errors (NFS, disk full on flush) surface at fsync or close: check both.
    if (::fsync(fd_) != 0) throw Error("cannot write " + path_ + ": " + errno_text());
    const int rc = ::close(fd_);
    const std::string close_error = rc == 0 ? "" : errno_text();
    fd_ = -1;
    if (rc != 0) throw Error("cannot write " + path_ + ": " + close_error);
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
        throw Error("cannot write " + path_ + ": renaming " + temp_path_ + " failed: " + errno_text());
    renamed_ = true;
    fsync_directory(path_);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
    AtomicFileWriter writer(path);
    writer.write(bytes.data(), bytes.size());
    writer.commit();
}

std::string read_file(const std::string& path, std::string_view what) {
    const std::string label = std::string(what) + " " + path;
    // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer;
    // reads of a regular file ignore it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error("cannot open " + label + ": " + errno_text());
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        const std::string reason = errno_text();
        ::close(fd);
        throw Error("cannot read " + label + ": " + reason);
    }
    // A device or a pipe has no size to bound the read by (/dev/zero never ends); a directory
    // falls through to read(), which names it (EISDIR).
    if (!S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode)) {
        ::close(fd);
        throw Error("cannot read " + label + ": not a regular file");
    }
    std::string bytes;
    if (info.st_size > 0) bytes.resize(static_cast<size_t>(info.st_size));
    // One spare byte so the read that sees end-of-file needs no reallocation.
    bytes.resize(bytes.size() + 1);
    size_t used = 0;
    for (;;) {
        if (used == bytes.size()) bytes.resize(bytes.size() * 2);  // the file grew while reading
        const ssize_t done = ::read(fd, bytes.data() + used, bytes.size() - used);
        if (done < 0 && errno == EINTR) continue;
        if (done < 0) {
            const std::string reason = errno_text();
            ::close(fd);
            throw Error("cannot read " + label + ": " + reason);
        }
        if (done == 0) break;
        used += static_cast<size_t>(done);
    }
    ::close(fd);
    bytes.resize(used);
    return bytes;
}

}  // namespace dqt
