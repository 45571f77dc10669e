#include "reader_targets.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/checksum.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/shard.h"
#include "data/byte_level_bpe.h"
#include "data/tokenizer.h"
#include "export/gguf_model.h"
#include "infer/inference_model.h"
#include "export/hf_export.h"
#include "export/hf_import.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/initialization.h"
#include "model/parameters.h"
#include "serve/api.h"
#include "serve/engine.h"
#include "train/model_checkpoint.h"

namespace dqt::fuzz {
namespace {

// A message longer than this (with the input file's path counted as 6 characters) is not a
// line a user reads; it usually means bytes of the file were echoed without bound.
constexpr size_t kLongestMessage = 500;

// The text the targets encode with every tokenizer they load.
constexpr std::string_view kProbeText = "Fellow citizens, 1790: tabs\tand accents \xc3\xa9 \xf0\x9f\x99\x82.\n";

void put_u32(std::vector<uint8_t>& bytes, size_t at, uint32_t value) {
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t get_u64(const std::vector<uint8_t>& bytes, size_t at) {
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value |= uint64_t{bytes[at + i]} << (8 * i);
    return value;
}

uint32_t crc_of(const std::vector<uint8_t>& bytes, size_t begin, size_t end) {
    return crc32_update(0, bytes.data() + begin, end - begin);
}

// The whole-file checksums recomputed where the layout lets them be found (docs/FORMATS.md), so
// that a mutated or crafted input reaches the checks behind them, as a file written by a buggy or
// hostile tool with valid checksums would. Per-tensor checksums of a checkpoint stay as they are.
std::vector<uint8_t> with_valid_checksums(Reader reader, std::span<const uint8_t> input) {
    std::vector<uint8_t> bytes(input.begin(), input.end());
    const size_t size = bytes.size();
    switch (reader) {
        case Reader::checkpoint:  // ... | u32 CRC of every byte before it | "DQTEND\0\0"
            if (size >= 12) put_u32(bytes, size - 12, crc_of(bytes, 0, size - 12));
            break;
        case Reader::tokenizer:  // ... | u32 CRC of every byte before it
            if (size >= 4) put_u32(bytes, size - 4, crc_of(bytes, 0, size - 4));
            break;
        case Reader::shard: {  // 64-byte header: token count at 24, bytes per token at 12, CRCs at 40 and 60
            if (size < 64) break;
            const uint64_t token_count = get_u64(bytes, 24);
            const uint32_t bytes_per_token = bytes[12] | bytes[13] << 8 | bytes[14] << 16 | uint32_t{bytes[15]} << 24;
            if (bytes_per_token == 2 || bytes_per_token == 4) {
                if (token_count <= (size - 64) / bytes_per_token) {
                    put_u32(bytes, 40, crc_of(bytes, 64, 64 + token_count * bytes_per_token));
                }
            }
            put_u32(bytes, 60, crc_of(bytes, 0, 60));
            break;
        }
        case Reader::gguf: {  // key "dqt.file_crc32" (u64 length, name), type u32 (4), the value
            static constexpr uint8_t key[] = {14, 0, 0, 0, 0, 0, 0, 0, 'd', 'q', 't', '.', 'f', 'i', 'l', 'e',
                                              '_', 'c', 'r', 'c', '3', '2', 4, 0, 0, 0};
            const auto found = std::search(bytes.begin(), bytes.end(), std::begin(key), std::end(key));
            const size_t slot = static_cast<size_t>(found - bytes.begin()) + sizeof key;
            if (found == bytes.end() || slot + 4 > size) break;
            put_u32(bytes, slot, 0);
            put_u32(bytes, slot, crc_of(bytes, 0, size));
            break;
        }
        case Reader::model_config:
        case Reader::corpus_text:
        case Reader::safetensors:
        case Reader::api_request:
        case Reader::corpus_jsonl:
        case Reader::hf_config:
        case Reader::hf_tokenizer: break;  // no checksum
    }
    return bytes;
}

void write_input(const std::string& path, std::span<const uint8_t> bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("fuzz harness: cannot write " + path);
}

}  // namespace

std::optional<std::string> message_defect(const std::string& message, const std::string& path) {
    if (message.empty()) return "an empty error message";
    if (message.find('\n') != std::string::npos) return "an error message over several lines: " + message;
    size_t length = message.size();
    for (size_t at = message.find(path); at != std::string::npos; at = message.find(path, at + path.size())) {
        length -= path.size() - 6;
    }
    if (length > kLongestMessage) {
        return "an error message of " + std::to_string(length) + " characters: " + message.substr(0, 300) + "...";
    }
    return std::nullopt;
}

namespace {

// Runs one reader call: the contract holds when it returns or throws a well-formed dqt::Error.
Outcome keeps_contract(const std::function<void()>& call, const std::string& path) {
    try {
        call();
    } catch (const Error& e) {
        return {message_defect(e.what(), path), false};
    } catch (const std::exception& e) {
        return {std::string("an exception other than dqt::Error: ") + e.what(), false};
    } catch (...) {
        return {std::string("an exception of unknown type"), false};
    }
    return {std::nullopt, true};
}

// The outcomes of several calls on one file, in order: the first defect stops.
Outcome all_keep_contract(const std::vector<std::function<void()>>& calls, const std::string& path) {
    Outcome combined{std::nullopt, true};
    for (const auto& call : calls) {
        const Outcome outcome = keeps_contract(call, path);
        if (outcome.defect) return outcome;
        combined.accepted = combined.accepted && outcome.accepted;
    }
    return combined;
}

// The tokenizer must map the probe text to ids inside its vocabulary and back to the same text.
void exercise(const Tokenizer& tokenizer) {
    const std::vector<int32_t> ids = tokenizer.encode(kProbeText);
    for (const int32_t id : ids) {
        if (id < 0 || id >= tokenizer.vocab_size()) throw std::logic_error("tokenizer produced an id outside its vocabulary");
    }
    // A dummy prefix (LLaMA's sentencepiece) is the one thing a round trip may add.
    const std::vector<int32_t> one = tokenizer.encode("a");
    const std::string prefix = tokenizer.decode(one) == " a" ? " " : "";
    if (tokenizer.decode(ids) != prefix + std::string(kProbeText))
        throw std::logic_error("tokenizer does not round-trip the probe text");
}

Outcome read_checkpoint(const std::string& path) {
    return all_keep_contract(
        {
            // The container alone: every tensor read at the dtype and shape the table gives.
            [&] {
                const CheckpointReader reader(path);
                for (const std::string& name : reader.names()) {
                    const std::vector<int64_t> shape = reader.shape(name);
                    const std::string dtype = reader.dtype(name);
                    size_t bytes = dtype_size(dtype);
                    for (const int64_t dim : shape) bytes *= static_cast<size_t>(dim);
                    std::vector<uint8_t> data(bytes);  // bounded by the file: the reader checked it
                    reader.read(name, dtype, shape, data.data(), data.size());
                }
            },
            // A training checkpoint as eval, generate and export load it, and as a resume reads it.
            [&] {
                const LoadedModel loaded = load_model_checkpoint(path);
                loaded.model->config.validate();
                exercise(*loaded.tokenizer);
            },
            [&] { exercise(*read_checkpoint_run(path).tokenizer); },
        },
        path);
}

Outcome read_shard(const std::string& path) {
    return keeps_contract(
        [&] {
            const Shard shard(path);
            std::vector<int32_t> tokens(shard.token_count());
            shard.read(0, tokens.size(), tokens.data());
            for (const int32_t id : tokens) {
                if (id < 0 || id >= shard.vocab_size()) throw std::logic_error("shard accepted an id outside its vocabulary");
            }
        },
        path);
}

Outcome read_gguf(const std::string& path) {
    return keeps_contract(
        [&] {
            const ImportedGguf imported = import_gguf(path);
            imported.model->config.validate();
            exercise(*imported.tokenizer);
            // The inference load reads the same file its own way: tensor by tensor, TQ2_0 codes
            // straight into the kernels' layout.
            const InferenceModel model(*open_gguf(path).tensors);
        },
        path);
}

Outcome read_model_config(const std::string& path) {
    return keeps_contract(
        [&] {
            const ModelConfig config = load_model_config_json(path).get<ModelConfig>();
            config.validate();
        },
        path);
}

Outcome read_tokenizer(const std::string& path) {
    return keeps_contract([&] { exercise(*load_tokenizer_file(path)); }, path);
}

// A single-file corpus is cut into parts at character boundaries: the parts put back together
// are the file, and each is valid UTF-8 on its own.
Outcome read_corpus_text(const std::string& path, std::span<const uint8_t> bytes) {
    return keeps_contract(
        [&] {
            const std::vector<Document> parts = read_corpus(path);
            std::string joined;
            for (const Document& part : parts) {
                if (find_invalid_utf8(part.text) != std::string::npos) throw std::logic_error("a part cut a character");
                joined += part.text;
            }
            if (joined != std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())) {
                throw std::logic_error("the parts do not put the file back together");
            }
            const CorpusSplit split = split_corpus(parts);
            if (split.train.size() + split.val.size() != parts.size()) throw std::logic_error("the split lost parts");
        },
        path);
}

// A JSON Lines corpus: each document accepted is valid UTF-8, and the split keeps them all.
Outcome read_corpus_jsonl(const std::string& path) {
    return keeps_contract(
        [&] {
            const std::vector<Document> documents = read_corpus(path);
            for (const Document& document : documents) {
                if (find_invalid_utf8(document.text) != std::string::npos) throw std::logic_error("a document is not UTF-8");
            }
            const CorpusSplit split = split_corpus(documents);
            if (split.train.size() + split.val.size() != documents.size()) throw std::logic_error("the split lost documents");
        },
        path);
}

// Every tensor read as the importers read it: floating-point ones as fp32, I32 ones as integers;
// what was accepted holds exactly the element count its shape says.
Outcome read_safetensors(const std::string& path) {
    return keeps_contract(
        [&] {
            const SafetensorsReader reader(path);
            for (const std::string& name : reader.names()) {
                int64_t count = 1;
                for (const int64_t dim : reader.shape(name)) count *= dim;
                const std::string& dtype = reader.dtype(name);
                size_t read = static_cast<size_t>(count);
                if (dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64") {
                    read = reader.read_f32(name).size();
                } else if (dtype == "I32") {
                    read = reader.read_i32(name).size();
                }
                if (read != static_cast<size_t>(count) || reader.element_count(name) != count) {
                    throw std::logic_error("a tensor's element count does not match its shape");
                }
            }
        },
        path);
}

// A tiny random ternary dqt model over bytes (dim 16, one layer, GQA), seq_len positions.
std::unique_ptr<ModelParameters> tiny_ternary_model(int seq_len, bool tie_embeddings) {
    ModelConfig c;
    c.dim = 16;
    c.n_layers = 1;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.ffn_dim = 32;
    c.vocab_size = 256;
    c.seq_len = seq_len;
    c.tie_embeddings = tie_embeddings;
    MethodConfig m;
    m.kind = Method::dqt;
    auto model = std::make_unique<ModelParameters>(c, m);
    initialize_parameters(*model, 1);
    return model;
}

// The model a request is checked against: 64 positions.
struct RequestModel {
    std::unique_ptr<Tokenizer> tokenizer = make_byte_tokenizer();
    std::unique_ptr<InferenceModel> model;
    std::unique_ptr<Engine> engine;
    RequestModel() {
        const std::unique_ptr<ModelParameters> parameters = tiny_ternary_model(64, false);
        model = std::make_unique<InferenceModel>(*parameters);
        engine = std::make_unique<Engine>(*model, *tokenizer, EngineOptions{1, 0, 0, KvCacheType::f32});
    }
};

// A request body as /v1/completions and /v1/chat/completions parse it: accepted with every
// field in range, or refused with a 4xx ApiError whose message is one readable line.
Outcome read_api_request(const std::string& path, std::span<const uint8_t> bytes) {
    static const RequestModel served;
    const std::string body(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    Outcome combined{std::nullopt, true};
    for (const bool chat : {false, true}) {
        const Outcome outcome = keeps_contract(
            [&] {
                try {
                    const CompletionCall call = parse_completion_request(body, chat, "tiny", *served.tokenizer,
                                                                         SpecialTokens{}, *served.engine);
                    for (const GenerationRequest& g : call.generations) {
                        const int room = served.engine->context() - static_cast<int>(g.prompt.size());
                        if (g.prompt.empty() || room < 1 || g.max_tokens < (g.echo ? 0 : 1) || g.max_tokens > room)
                            throw std::logic_error("an accepted request does not fit the context");
                        if (!served.engine->check_request(g).empty())
                            throw std::logic_error("an accepted request the engine refuses");
                    }
                    if (call.generations.empty()) throw std::logic_error("an accepted request without a prompt");
                } catch (const ApiError& e) {
                    if (e.status() < 400 || e.status() > 499)
                        throw std::logic_error("a malformed request answered " + std::to_string(e.status()));
                    throw Error(e.what());  // the contract's check of the message
                }
            },
            path);
        if (outcome.defect) return outcome;
        combined.accepted = combined.accepted && outcome.accepted;
    }
    return combined;
}

// The folder a Hugging Face input is read in: the tiny ternary model with tied embeddings and
// 16 positions, exported by dqt (scripts/make_fuzz_seeds.sh exports the same shape for the
// seeds), made once per scratch folder; the input then replaces one of its files.
std::string hf_folder(const std::string& scratch_dir, const std::string& name) {
    const std::string folder = scratch_dir + "/" + name;
    if (std::filesystem::exists(folder + "/model.safetensors")) return folder;
    std::filesystem::remove_all(folder);
    export_hf_folder(*tiny_ternary_model(16, true), *make_byte_tokenizer(), SpecialTokens{}, folder);
    return folder;
}

// A config.json against fixed weights: what is accepted is a valid model whose tokenizer
// encodes and decodes the probe text.
Outcome read_hf_config(const std::string& folder) {
    return keeps_contract(
        [&] {
            const ImportedHf imported = import_hf_folder(folder);
            imported.model->config.validate();
            const std::vector<int32_t> ids = imported.tokenizer->encode(kProbeText);
            if (imported.tokenizer->decode(ids) != kProbeText) throw std::logic_error("the tokenizer does not round-trip");
            if (import_hf_tokenizer(folder)->vocab_size() != imported.model->config.vocab_size)
                throw std::logic_error("the tokenizer alone differs from the model's");
        },
        folder + "/config.json");
}

// A tokenizer.json (byte-level BPE, data/byte_level_bpe.h): what is accepted round-trips the
// probe text and reloads from its stored form.
Outcome read_hf_tokenizer(const std::string& path) {
    return keeps_contract(
        [&] {
            const std::unique_ptr<Tokenizer> tokenizer = load_byte_level_bpe(read_file(path), path);
            if (tokenizer->decode(tokenizer->encode(kProbeText)) != kProbeText)
                throw std::logic_error("the tokenizer does not round-trip");
            if (!same_tokenizer(*tokenizer, *load_tokenizer(tokenizer->kind(), tokenizer->serialize())))
                throw std::logic_error("the stored form reloads differently");
        },
        path);
}

}  // namespace

const std::vector<NamedReader>& all_readers() {
    static const std::vector<NamedReader> readers = {
        {Reader::checkpoint, "checkpoint"}, {Reader::shard, "shard"},          {Reader::gguf, "gguf"},
        {Reader::model_config, "model_config"}, {Reader::tokenizer, "tokenizer"}, {Reader::corpus_text, "corpus_text"},
        {Reader::safetensors, "safetensors"}, {Reader::api_request, "api_request"}, {Reader::corpus_jsonl, "corpus_jsonl"},
        {Reader::hf_config, "hf_config"},     {Reader::hf_tokenizer, "hf_tokenizer"},
    };
    return readers;
}

Outcome feed(Reader reader, std::span<const uint8_t> bytes, const std::string& scratch_dir) {
    // Each reader sees the file under the name a user would give it.
    static constexpr const char* kFileNames[] = {"checkpoint.dqt", "train.bin",      "model.gguf",
                                                 "model.json",     "tokenizer.bin", "corpus.txt",
                                                 "model.safetensors", "request.json",  "corpus.jsonl",
                                                 "hf/config.json",  "tokenizer.json"};
    if (reader == Reader::hf_config) hf_folder(scratch_dir, "hf");
    const std::string path = scratch_dir + "/" + kFileNames[static_cast<int>(reader)];
    write_input(path, with_valid_checksums(reader, bytes));
    switch (reader) {
        case Reader::checkpoint: return read_checkpoint(path);
        case Reader::shard: return read_shard(path);
        case Reader::gguf: return read_gguf(path);
        case Reader::model_config: return read_model_config(path);
        case Reader::tokenizer: return read_tokenizer(path);
        case Reader::corpus_text: return read_corpus_text(path, bytes);
        case Reader::safetensors: return read_safetensors(path);
        case Reader::api_request: return read_api_request(path, bytes);
        case Reader::corpus_jsonl: return read_corpus_jsonl(path);
        case Reader::hf_config: return read_hf_config(scratch_dir + "/hf");
        case Reader::hf_tokenizer: return read_hf_tokenizer(path);
    }
    return {"unknown reader", false};
}

}  // namespace dqt::fuzz
