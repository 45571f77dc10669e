#pragma once
// Crash-safe file writes: a reader sees either the old file or the complete new one.
#include <string>
#include <string_view>
#include <vector>

namespace dqt {

// Writes the pieces, in order, to path + ".tmp", fsyncs it, renames it over path and fsyncs
// the folder. On any failure the temporary file is removed and dqt::Error names the path.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

// The whole file as bytes; dqt::Error naming `what` and the path when it cannot be read.
std::string read_file_bytes(const std::string& path, const std::string& what);

}  // namespace dqt
