#include "data/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dqt {
namespace {

// Closes the descriptor and removes the temporary file unless the write completed.
struct TempFile {
    std::string path;
    int fd = -1;
    bool committed = false;
    ~TempFile() {
        if (fd >= 0) ::close(fd);
        if (!committed) ::unlink(path.c_str());
    }
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
    TempFile tmp{path + ".tmp"};
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    require(tmp.fd >= 0, "cannot write " + path + ": " + errno_text() + " (check the folder exists and is writable)");
    for (std::string_view piece : pieces) {
        while (!piece.empty()) {
            const ssize_t written = ::write(tmp.fd, piece.data(), piece.size());
            if (written < 0 && errno == EINTR) continue;
            require(written > 0, "cannot write " + path + ": " + errno_text() + " (check free disk space)");
            piece.remove_prefix(static_cast<size_t>(written));
        }
    }
    require(::fsync(tmp.fd) == 0, "cannot write " + path + ": fsync failed: " + errno_text());
    const int fd = tmp.fd;
    tmp.fd = -1;
    require(::close(fd) == 0, "cannot write " + path + ": close failed: " + errno_text());
    require(::rename(tmp.path.c_str(), path.c_str()) == 0,
            "cannot write " + path + ": rename from " + tmp.path + " failed: " + errno_text());
    tmp.committed = true;
    // The rename itself is durable only once the folder's entry is on disk.
    std::string folder = std::filesystem::path(path).parent_path().string();
    if (folder.empty()) folder = ".";
    const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
        ::fsync(dir_fd);
        ::close(dir_fd);
    }
}

std::string read_file_bytes(const std::string& path, const std::string& what) {
    std::error_code ec;
    require(std::filesystem::exists(path, ec), what + " " + path + " not found");
    std::ifstream in(path, std::ios::binary);
    require(in.good(), what + " " + path + ": cannot open (" + errno_text() + "): check its permissions");
    std::ostringstream contents;
    contents << in.rdbuf();
    require(!in.bad(), what + " " + path + ": read failed");
    return std::move(contents).str();
}

}  // namespace dqt
