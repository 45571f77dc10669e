#pragma once
// One exception type for every user-facing failure. The CLI catches it and prints
// "dqt: error: <message>" on one line with a non-zero exit: messages name the thing and the fix.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dqt {

struct Error : std::runtime_error {
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A name or value read from a file, fit for a one-line message: in single quotes, bytes outside
// printable ASCII written as \xNN, and cut after `shown` characters ("..." marks the cut), so
// that a crafted file cannot make a message span lines or pages.
inline std::string quote_untrusted(std::string_view text, size_t shown = 60) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out = "'";
    for (size_t i = 0; i < text.size() && i < shown; ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte >= 0x20 && byte < 0x7f) {
            out += static_cast<char>(byte);
        } else {
            out += "\\x";
            out += kHex[byte >> 4];
            out += kHex[byte & 15];
        }
    }
    out += text.size() > shown ? "'..." : "'";
    return out;
}

// A number for a message: six significant digits ("1e+300", "-1e-09", "0.25"), where
// std::to_string would write 300 digits for 1e300 and "0.000000" for 1e-9.
inline std::string format_number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", value);
    return text;
}

// Throws dqt::Error(message) when condition is false: for bad input, and for an invariant the
// code relies on, whose message then starts "internal error: " and names it (a one-line report
// a user can pass on, not a crash).
inline void require(bool condition, const std::string& message) {
    if (!condition) throw Error(message);
}

}  // namespace dqt
