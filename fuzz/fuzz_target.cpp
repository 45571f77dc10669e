// libFuzzer entry point of one reader of fuzz/reader_targets.h, picked at compile time by
// DQT_FUZZ_READER (CMakeLists.txt builds one fuzz_<reader> binary per reader when DQT_FUZZ is
// on; scripts/fuzz.sh runs them). A broken contract prints the defect and aborts, which
// libFuzzer records as a crash with the input that caused it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "reader_targets.h"

namespace {

std::string make_scratch_dir() {
    const std::filesystem::path base =
        std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    const std::filesystem::path dir = base / ("dqt-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    return dir.string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string scratch_dir = make_scratch_dir();
    static const int cleanup_registered = std::atexit([] { std::filesystem::remove_all(scratch_dir); });
    (void)cleanup_registered;
    const dqt::fuzz::Outcome outcome = dqt::fuzz::feed(dqt::fuzz::Reader::DQT_FUZZ_READER, {data, size}, scratch_dir);
    if (outcome.defect) {
        std::fprintf(stderr, "dqt fuzz: reader broke its contract: %s\n", outcome.defect->c_str());
        std::abort();
    }
    return 0;
}
