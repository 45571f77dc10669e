#pragma once
// The OpenAI-style API's JSON: requests parsed and checked into a GenerationRequest, responses
// and stream chunks built, errors shaped as OpenAI's ({"error": {"message", "type", "param",
// "code"}}) with the HTTP status to answer. No HTTP here (serve/http_server.h).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "serve/engine.h"

namespace dqt {

// A request the server refuses: its HTTP status (4xx, or 503 when busy) and OpenAI's error body.
class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string type, const std::string& message, std::string param = "");
    int status() const { return status_; }
    nlohmann::json body() const;

private:
    int status_;
    std::string type_, param_;
};

// What a completion request asks for, checked against the engine (context, vocabulary): one
// generation per prompt (a chat request and a streamed one have one), alike but for the prompt.
struct CompletionCall {
    std::vector<GenerationRequest> generations;
    bool stream = false;
    bool chat = false;
};

// One prompt's answer as a whole response gives it: its text, its tokens' logprobs (when asked
// for) and its stream's last update (finish reason and counts).
struct ChoiceResult {
    std::string text;
    std::vector<TokenLogprobs> logprobs;
    StreamUpdate end;
};

// The prompt of `messages` under dqt's chat template (data/chat_template.h, docs/serve.md):
// "<|user|>\n...\n" per message, then "<|assistant|>\n"; ApiError (400) for messages that
// are not a non-empty array of {role: system|developer|user|assistant, content: a string or
// text parts}.
std::string apply_chat_template(const nlohmann::json& messages);

// The 404 for a model id this server does not serve (`served`).
ApiError unknown_model(const std::string& requested, const std::string& served);

// Parses a /v1/completions (chat = false) or /v1/chat/completions body; ApiError (400, or 404
// for a model this server does not serve) for anything malformed or out of range. A text
// prompt starts with BOS where `special` says (a prompt of token ids is taken as given), and
// the generation ends at an end-of-generation token where it says, unless `ignore_eos`
// (llama-server's extension) is true. A completion's prompt may be several (an array of
// strings or of token-id arrays), up to the engine's slots and queue places.
CompletionCall parse_completion_request(const std::string& body, bool chat, const std::string& model_name,
                                        const Tokenizer& tokenizer, const SpecialTokens& special,
                                        const Engine& engine);

// OpenAI's finish_reason: "stop" for a stop string, "length" for max_tokens or a full context.
const char* api_finish_reason(FinishReason reason);

// A whole response (a choice per prompt, usage summed over them), and one stream chunk (text,
// or the final one with a finish reason; a chat stream's first chunk also names the role).
// Logprobs are shown where the request asked for them: a chunk's are those of the tokens
// sampled for it.
nlohmann::json completion_response(const CompletionCall& call, const std::string& id, const std::string& model_name,
                                   int64_t created, const std::vector<ChoiceResult>& results);
nlohmann::json completion_chunk(const CompletionCall& call, const std::string& id, const std::string& model_name,
                                int64_t created, const std::string& text, const std::vector<TokenLogprobs>& logprobs,
                                const StreamUpdate* end, bool first);

// JSON text of a value that may hold bytes that are not UTF-8 (a byte-level model can
// generate any): invalid sequences become U+FFFD instead of an exception.
std::string dump_json(const nlohmann::json& value);

}  // namespace dqt
