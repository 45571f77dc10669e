#pragma once
// The readers of untrusted bytes, as fuzz targets (fuzz/fuzz_target.cpp, built by
// scripts/fuzz.sh) and as a replay test of the seed and regression files in fuzz/
// (tests/test_fuzz_replay.cpp). Each target writes the bytes to a file, hands that file to one
// reader, and exercises what the reader returned. Before the bytes are written, the file's
// whole-file checksums are recomputed (where its layout lets them be found), so mutations reach
// the checks behind them, as a file a buggy or hostile tool wrote with valid checksums would. The contract every reader keeps: it accepts
// the file, or refuses it with one dqt::Error whose message is a single readable line. Any
// other outcome is a defect: another exception type, a message over several lines or too long
// to read, a broken property of what was accepted, and (in the sanitizer builds) any memory or
// undefined-behaviour error.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dqt::fuzz {

// One target per kind of file a user can hand dqt, and the body of a request to `dqt serve`.
enum class Reader {
    checkpoint, shard, gguf, model_config, tokenizer, corpus_text, safetensors, api_request, corpus_jsonl,
    hf_config,       // config.json of a Hugging Face folder whose weights and tokenizer are fixed
    hf_tokenizer,    // a Hugging Face tokenizer.json (byte-level BPE)
};

// Every reader with its name, which is also its folder under fuzz/seeds and fuzz/regressions.
struct NamedReader {
    Reader reader;
    const char* name;
};
const std::vector<NamedReader>& all_readers();

struct Outcome {
    std::optional<std::string> defect;  // what broke the contract; empty when it was kept
    bool accepted = false;              // every call of the target accepted the file
};

// What is wrong with an error message, if anything: empty, several lines, or longer than a
// readable line (the input file's path, which the user chose, counted as 6 characters).
std::optional<std::string> message_defect(const std::string& message, const std::string& path);

// Feeds bytes to a reader through a file in scratch_dir.
Outcome feed(Reader reader, std::span<const uint8_t> bytes, const std::string& scratch_dir);

}  // namespace dqt::fuzz
