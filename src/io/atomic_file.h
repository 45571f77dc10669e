#pragma once
// Crash-safe file output: bytes go to "<path>.tmp.<pid>", and only commit() (fsync, rename,
// fsync of the directory) makes them appear under <path>. A reader therefore sees either the
// old file or the complete new one, never a half-written file.
#include <cstddef>
#include <string>
#include <string_view>

namespace dqt {

// Owns the temporary file: destroying the writer without commit() removes it. Creating one
// first removes the temporary files of earlier writers of the same path whose process is gone
// (a kill -9 during a write leaves one behind).
class AtomicFileWriter {
public:
    // Throws dqt::Error naming path when the temporary file cannot be created
    // (missing directory, no permission, ...).
    explicit AtomicFileWriter(const std::string& path);
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    // Appends bytes; throws dqt::Error naming path on any failure (disk full, I/O error).
    void write(const void* data, size_t bytes);
    // Flushes to disk and renames over path. Call once; no write() after it.
    void commit();

    const std::string& path() const { return path_; }
    const std::string& temp_path() const { return temp_path_; }

private:
    std::string path_;
    std::string temp_path_;
    int fd_ = -1;
    bool renamed_ = false;
};

// Replaces path with bytes atomically.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Whole file contents. `what` names the kind of file in the error, e.g. "checkpoint file"
// gives "cannot open checkpoint file X: No such file or directory".
std::string read_file(const std::string& path, std::string_view what = "file");

}  // namespace dqt
