// Validators for whole-number flags. CLI11's PositiveNumber and NonNegativeNumber name their
// range with the largest double written out in full: a 300-digit message for `--top-k -2`.
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>

#include "commands.h"

namespace dqt::cli {
namespace {

// Parses text as a whole number; false when it is not one (CLI11's own conversion then
// reports it with the flag's name).
bool read_whole_number(const std::string& text, long long& value) {
    if (text.empty()) return false;
    char* end = nullptr;
    errno = 0;
    value = std::strtoll(text.c_str(), &end, 10);
    return errno == 0 && *end == '\0';
}

CLI::Validator whole_number_at_least(long long smallest, const std::string& description) {
    return CLI::Validator(
        [smallest, description](const std::string& text) -> std::string {
            long long value = 0;
            if (!read_whole_number(text, value)) return {};
            return value < smallest ? "must be " + description + ", got " + text : std::string();
        },
        description);
}

}  // namespace

CLI::Validator positive_whole_number() { return whole_number_at_least(1, "positive"); }

CLI::Validator non_negative_whole_number() { return whole_number_at_least(0, "0 or more"); }

CLI::Validator seed_number() {
    return CLI::Validator(
        [](const std::string& text) -> std::string {
            unsigned long long value = 0;
            const char* end = text.data() + text.size();
            const auto [at, error] = std::from_chars(text.data(), end, value);
            if (error == std::errc{} && at == end) return {};
            return "must be a whole number from 0 to 18446744073709551615, got " + text;
        },
        "0 to 2^64 - 1");
}

}  // namespace dqt::cli
