#pragma once
// One exception type for every user-facing failure. The CLI catches it and prints
// "dqt: error: <message>" on one line with a non-zero exit: messages name the thing and the fix.
#include <stdexcept>
#include <string>

namespace dqt {

struct Error : std::runtime_error {
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws dqt::Error(message) when condition is false. For input validation, not internal bugs.
inline void require(bool condition, const std::string& message) {
    if (!condition) throw Error(message);
}

}  // namespace dqt
