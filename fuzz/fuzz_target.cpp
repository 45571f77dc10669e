// libFuzzer entry point of one reader of fuzz/reader_targets.h, picked at compile time by
// DQT_FUZZ_READER (CMakeLists.txt builds one fuzz_<reader> binary per reader when DQT_FUZZ is
// on; scripts/fuzz.sh runs them). A broken contract prints the defect and aborts, which
// libFuzzer records as a crash with the input that caused it. At exit it prints how many
// inputs the reader accepted and how many it refused cleanly (scripts/fuzz.sh reads the line).
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

// Inputs kept to the contract so far, by what the reader did with them.
uint64_t accepted_inputs = 0;
uint64_t refused_inputs = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string scratch_dir = make_scratch_dir();
    static const int cleanup_registered = std::atexit([] {
        std::filesystem::remove_all(scratch_dir);
        std::fprintf(stderr, "dqt fuzz: accepted %llu, refused cleanly %llu\n",
                     static_cast<unsigned long long>(accepted_inputs), static_cast<unsigned long long>(refused_inputs));
    });
    (void)cleanup_registered;
    const dqt::fuzz::Outcome outcome = dqt::fuzz::feed(dqt::fuzz::Reader::DQT_FUZZ_READER, {data, size}, scratch_dir);
    if (outcome.defect) {
        std::fprintf(stderr, "dqt fuzz: reader broke its contract: %s\n", outcome.defect->c_str());
        std::abort();
    }
    ++(outcome.accepted ? accepted_inputs : refused_inputs);
    return 0;
}
