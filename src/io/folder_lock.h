#pragma once
// An exclusive advisory lock on a folder (flock on the folder itself), held for the lifetime
// of the object: two training runs writing one run folder would otherwise interleave their
// checkpoints, configs and metrics. Released when the object is destroyed or the process ends
// (also by kill -9: the kernel drops the lock with the file descriptor).
#include <string>

namespace dqt {

class FolderLock {
public:
    // dqt::Error naming the folder when another process holds its lock, or it cannot be opened.
    explicit FolderLock(const std::string& folder);
    ~FolderLock();
    FolderLock(const FolderLock&) = delete;
    FolderLock& operator=(const FolderLock&) = delete;

private:
    int fd_ = -1;
};

}  // namespace dqt
