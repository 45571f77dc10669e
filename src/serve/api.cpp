#include "serve/api.h"

#include <algorithm>
#include <cstdio>

#include "data/corpus.h"

namespace dqt {

ApiError::ApiError(int status, std::string type, const std::string& message, std::string param)
    : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)) {}

nlohmann::json ApiError::body() const {
    return {{"error",
             {{"message", what()},
              {"type", type_},
              {"param", param_.empty() ? nlohmann::json(nullptr) : nlohmann::json(param_)},
              {"code", nullptr}}}};
}

namespace {

ApiError invalid(const std::string& message, const std::string& param = "") {
    return ApiError(400, "invalid_request_error", message, param);
}

const char* type_name(const nlohmann::json& value) { return value.type_name(); }

// body[key] when present and not null; ApiError when it has another type than `check` accepts.
template <typename Check>
const nlohmann::json* field(const nlohmann::json& body, const char* key, Check check, const char* expected) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    if (!check(*it))
        throw invalid(std::string("'") + key + "' must be " + expected + ", got " + type_name(*it), key);
    return &*it;
}

// A client's string as an error message may echo it: JSON-quoted, so a newline stays on the
// message's one line, and cut to 64 bytes, so a long one cannot make the message long.
std::string echoed(const std::string& client_text) {
    constexpr size_t kLongestEcho = 64;
    if (client_text.size() <= kLongestEcho) return dump_json(client_text);
    return dump_json(client_text.substr(0, kLongestEcho)) + "...";
}

bool is_integer(const nlohmann::json& v) { return v.is_number_integer(); }
bool is_number(const nlohmann::json& v) { return v.is_number(); }

double number_in(const nlohmann::json& body, const char* key, double fallback, double low, double high,
                 const char* range) {
    const nlohmann::json* v = field(body, key, is_number, "a number");
    if (!v) return fallback;
    const double x = v->get<double>();
    if (!(x >= low && x <= high)) throw invalid(std::string("'") + key + "' must be " + range, key);
    return x;
}

std::vector<std::string> stop_strings(const nlohmann::json& body) {
    const auto it = body.find("stop");
    if (it == body.end() || it->is_null()) return {};
    std::vector<std::string> stop;
    if (it->is_string()) {
        stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 4) {
        for (const nlohmann::json& s : *it) {
            if (!s.is_string()) throw invalid("'stop' must be a string or an array of up to 4 strings", "stop");
            stop.push_back(s.get<std::string>());
        }
    } else {
        throw invalid("'stop' must be a string or an array of up to 4 strings", "stop");
    }
    for (const std::string& s : stop) {
        if (s.empty()) throw invalid("'stop' strings must not be empty", "stop");
    }
    return stop;
}

// OpenAI options that would change the answer and that this server does not implement: a
// request setting one gets a 400 naming it rather than an answer that silently ignored it (an
// evaluation harness asking for echo and logprobs would otherwise score text it never got).
// Each is accepted at its neutral value: left out, null, or the value that means "off".
void refuse_unimplemented_options(const nlohmann::json& body) {
    struct Option {
        const char* key;
        bool (*neutral)(const nlohmann::json&);
        const char* neutral_text;
    };
    static const Option kOptions[] = {
        {"frequency_penalty", [](const nlohmann::json& v) { return v == 0; }, "0"},
        {"presence_penalty", [](const nlohmann::json& v) { return v == 0; }, "0"},
        {"logit_bias", [](const nlohmann::json& v) { return v.is_object() && v.empty(); }, "{}"},
        {"best_of", [](const nlohmann::json& v) { return v == 1; }, "1"},
        {"suffix", [](const nlohmann::json& v) { return v == ""; }, "\"\""},
        {"tools", [](const nlohmann::json& v) { return v.is_array() && v.empty(); }, "[]"},
        {"functions", [](const nlohmann::json& v) { return v.is_array() && v.empty(); }, "[]"},
        {"response_format", [](const nlohmann::json& v) { return v == nlohmann::json{{"type", "text"}}; },
         "{\"type\": \"text\"}"},
    };
    for (const Option& option : kOptions) {
        const auto it = body.find(option.key);
        if (it == body.end() || it->is_null() || option.neutral(*it)) continue;
        throw invalid(std::string("'") + option.key + "' is not supported by dqt serve: leave it out or set it to " +
                          option.neutral_text,
                      option.key);
    }
}

// The alternatives per token a request asks logprobs for (-1: none). Completions take
// `logprobs`: an integer from 0 to 5 (OpenAI's limit); chat takes `logprobs`: true and
// `top_logprobs`: 0 to 20. A false `logprobs` means none in both.
int requested_logprobs(const nlohmann::json& body, bool chat) {
    const auto is_boolean_or_integer = [](const nlohmann::json& v) { return v.is_boolean() || v.is_number_integer(); };
    const nlohmann::json* logprobs = field(body, "logprobs", is_boolean_or_integer, "an integer or a boolean");
    const nlohmann::json* top = field(body, "top_logprobs", is_integer, "an integer");
    if (!chat) {
        if (top && *top != 0)
            throw invalid("'top_logprobs' is chat's: completions ask for alternatives with 'logprobs': 0 to 5",
                          "top_logprobs");
        if (!logprobs || *logprobs == false) return -1;
        if (!logprobs->is_number_integer() || *logprobs < 0 || *logprobs > 5)
            throw invalid("'logprobs' must be an integer from 0 to 5 (alternatives per token)", "logprobs");
        return logprobs->get<int>();
    }
    if (logprobs && !logprobs->is_boolean())
        throw invalid("'logprobs' must be a boolean (alternatives: 'top_logprobs')", "logprobs");
    const bool wanted = logprobs && logprobs->get<bool>();
    if (!top) return wanted ? 0 : -1;
    if (*top < 0 || *top > 20) throw invalid("'top_logprobs' must be an integer from 0 to 20", "top_logprobs");
    if (!wanted && *top != 0) throw invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    return wanted ? top->get<int>() : -1;
}

// A completion's prompts, one choice each: a string or an array of token ids (one prompt), or
// an array of strings or of token-id arrays (several, at most `most`: the engine's slots and
// queue places). A text prompt starts with BOS where `special` says; token ids are taken as
// given. The engine checks the ids against the vocabulary.
std::vector<std::vector<int32_t>> completion_prompts(const nlohmann::json& body, const Tokenizer& tokenizer,
                                                     const SpecialTokens& special, int most) {
    const char* expected = "'prompt' is required: a string, an array of token ids, or an array of either";
    const auto p = body.find("prompt");
    if (p == body.end() || !(p->is_string() || p->is_array()) || (p->is_array() && p->empty()))
        throw invalid(expected, "prompt");
    const auto one_prompt = [&](const nlohmann::json& prompt) {
        if (prompt.is_string()) return special.prompt(tokenizer, prompt.get<std::string>());
        std::vector<int32_t> tokens;
        for (const nlohmann::json& token : prompt) {
            if (!token.is_number_integer() || token < 0 || token >= tokenizer.vocab_size())
                throw invalid(std::string(expected) + "; a token id is from 0 to " +
                                  std::to_string(tokenizer.vocab_size() - 1),
                              "prompt");
            tokens.push_back(token.get<int32_t>());
        }
        return tokens;
    };
    if (p->is_string() || p->front().is_number()) return {one_prompt(*p)};
    if (static_cast<int>(p->size()) > most)
        throw invalid("'prompt' holds " + std::to_string(p->size()) + " prompts, more than the " + std::to_string(most) +
                          " this server takes in one request (--parallel + --queue)",
                      "prompt");
    std::vector<std::vector<int32_t>> prompts;
    for (const nlohmann::json& prompt : *p) {
        if (!prompt.is_string() && !prompt.is_array()) throw invalid(expected, "prompt");
        prompts.push_back(one_prompt(prompt));
    }
    return prompts;
}

// A message's text: its content string, or its array of text parts ({"type": "text", "text":
// ...}, the form chat UIs and agent frameworks send) joined by newlines, as llama-server joins
// them for a template that takes a string.
std::string message_text(const nlohmann::json& content) {
    const char* expected = "each message's 'content' must be a string or an array of {\"type\": \"text\", \"text\": ...} parts";
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array() || content.empty()) throw invalid(expected, "messages");
    std::string text;
    for (const nlohmann::json& part : content) {
        if (!part.is_object()) throw invalid(expected, "messages");
        const auto type = part.find("type"), part_text = part.find("text");
        if (type != part.end() && type->is_string() && *type != "text")
            throw invalid("a message part of type " + echoed(type->get<std::string>()) +
                              " is not supported: dqt serve reads text parts only",
                          "messages");
        if (type == part.end() || part_text == part.end() || !part_text->is_string())
            throw invalid(expected, "messages");
        if (&part != &content.front()) text += "\n";
        text += part_text->get<std::string>();
    }
    return text;
}

}  // namespace

ApiError unknown_model(const std::string& requested, const std::string& served) {
    return ApiError(404, "invalid_request_error",
                    "The model " + echoed(requested) + " does not exist: this server serves " + echoed(served), "model");
}

std::string apply_chat_template(const nlohmann::json& messages) {
    if (!messages.is_array() || messages.empty())
        throw invalid("'messages' must be a non-empty array of {role, content} objects", "messages");
    std::string prompt;
    for (const nlohmann::json& m : messages) {
        if (!m.is_object()) throw invalid("each message must be an object with 'role' and 'content'", "messages");
        const auto role = m.find("role"), content = m.find("content");
        if (role == m.end() || !role->is_string() ||
            (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant"))
            throw invalid("each message's 'role' must be \"system\" (or \"developer\"), \"user\" or \"assistant\"",
                          "messages");
        if (content == m.end()) throw invalid("each message needs a 'content'", "messages");
        // "developer" is OpenAI's newer name for the system role.
        const std::string name = *role == "developer" ? "system" : role->get<std::string>();
        prompt += "<|" + name + "|>\n" + message_text(*content) + "\n";
    }
    return prompt + "<|assistant|>\n";
}

CompletionCall parse_completion_request(const std::string& text, bool chat, const std::string& model_name,
                                        const Tokenizer& tokenizer, const SpecialTokens& special,
                                        const Engine& engine) {
    nlohmann::json body;
    try {
        body = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
        throw invalid("the request body is not valid JSON");
    }
    if (!body.is_object()) throw invalid("the request body must be a JSON object");
    if (const nlohmann::json* model = field(body, "model", [](const auto& v) { return v.is_string(); }, "a string")) {
        if (*model != model_name) throw unknown_model(model->get<std::string>(), model_name);
    }
    if (const nlohmann::json* n = field(body, "n", is_integer, "an integer"); n && *n != 1)
        throw invalid("'n' must be 1: one choice per prompt", "n");
    refuse_unimplemented_options(body);

    CompletionCall call;
    call.chat = chat;
    GenerationRequest g;  // the options every prompt of the request runs with
    std::vector<std::vector<int32_t>> prompts;
    if (chat) {
        const auto messages = body.find("messages");
        if (messages == body.end()) throw invalid("'messages' is required", "messages");
        prompts.push_back(special.prompt(tokenizer, apply_chat_template(*messages)));
    } else {
        prompts = completion_prompts(body, tokenizer, special, engine.parallel() + engine.queue_limit());
    }
    const char* prompt_param = chat ? "messages" : "prompt";
    const auto is_boolean = [](const nlohmann::json& v) { return v.is_boolean(); };
    if (const nlohmann::json* e = field(body, "echo", is_boolean, "a boolean"); e && e->get<bool>()) {
        if (chat) throw invalid("'echo' is for completions: a chat answer does not repeat the messages", "echo");
        g.echo = true;
    }
    g.end_tokens = special.end_of_generation;
    size_t longest = 0;
    for (const std::vector<int32_t>& prompt : prompts) {
        if (prompt.empty()) throw invalid("the prompt is empty", prompt_param);
        longest = std::max(longest, prompt.size());
    }
    const int room = engine.context() - static_cast<int>(longest);
    if (room < 1)
        throw invalid("the prompt is " + std::to_string(longest) + " tokens, but the context holds " +
                          std::to_string(engine.context()) + " with room for at least one new token",
                      prompt_param);
    // Chat answers run to their turn's end by default; completions stop at 16 tokens, as OpenAI's.
    const int default_tokens = chat ? room : std::min(16, room);
    // The newer name wins where both are given (a null counts as not given).
    const auto newer = body.find("max_completion_tokens");
    const char* max_key = newer != body.end() && !newer->is_null() ? "max_completion_tokens" : "max_tokens";
    g.max_tokens = default_tokens;
    if (const nlohmann::json* m = field(body, max_key, is_integer, "an integer")) {
        // Non-negative JSON integers parse as unsigned: one past int64's range must not wrap.
        const bool in_range = m->is_number_unsigned() ? m->get<uint64_t>() <= static_cast<uint64_t>(room)
                                                      : m->get<int64_t>() <= room;
        // An echoed prompt may be scored alone (OpenAI's echo with max_tokens 0).
        const int least = g.echo ? 0 : 1;
        if (!in_range || *m < least)
            throw invalid(std::string("'") + max_key + "' must be from " + std::to_string(least) + " to " +
                              std::to_string(room) +
                              " (the context left after the prompt), got " + m->dump(),
                          max_key);
        g.max_tokens = m->get<int>();
    }
    g.sampling.temperature = static_cast<float>(number_in(body, "temperature", g.sampling.temperature, 0.0, 2.0,
                                                          "a number from 0 to 2"));
    g.sampling.top_p = static_cast<float>(number_in(body, "top_p", g.sampling.top_p, 0.0, 1.0,
                                                    "a number in (0, 1]"));
    if (g.sampling.top_p <= 0.0f) throw invalid("'top_p' must be a number in (0, 1]", "top_p");
    if (const nlohmann::json* k = field(body, "top_k", is_integer, "an integer")) {
        if (*k < 0 || *k > tokenizer.vocab_size())
            throw invalid("'top_k' must be from 0 (all tokens) to the vocabulary's " +
                              std::to_string(tokenizer.vocab_size()),
                          "top_k");
        g.sampling.top_k = k->get<int>();
    }
    if (const nlohmann::json* s = field(body, "seed", is_integer, "an integer from 0 to 2^64 - 1")) {
        // Negative JSON integers are the only ones not parsed as unsigned.
        if (!s->is_number_unsigned()) throw invalid("'seed' must be an integer from 0 to 2^64 - 1", "seed");
        g.sampling.seed = s->get<uint64_t>();
    }
    g.stop = stop_strings(body);
    if (chat) g.stop.push_back(kChatTurnEnd);
    // llama-server's extension, for benchmarks that need every generation at max_tokens.
    if (const nlohmann::json* e = field(body, "ignore_eos", is_boolean, "a boolean"); e && e->get<bool>())
        g.end_tokens.clear();
    if (const nlohmann::json* s = field(body, "stream", is_boolean, "a boolean"))
        call.stream = s->get<bool>();
    if (call.stream && prompts.size() > 1)
        throw invalid("'stream' takes one prompt: send the others in requests of their own", "stream");
    g.logprobs = requested_logprobs(body, chat);
    for (std::vector<int32_t>& prompt : prompts) {
        call.generations.push_back(g);
        call.generations.back().prompt = std::move(prompt);
        const std::string problem = engine.check_request(call.generations.back());
        if (!problem.empty()) throw invalid(problem);
    }
    return call;
}

const char* api_finish_reason(FinishReason reason) { return reason == FinishReason::stop ? "stop" : "length"; }

namespace {

nlohmann::json envelope(const CompletionCall& call, const std::string& id, const std::string& model_name,
                        int64_t created, bool chunk) {
    const char* object = call.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model_name}};
}

nlohmann::json usage(int prompt_tokens, int completion_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
}

// A token's text as OpenAI's logprobs name it: its bytes when they are UTF-8, else
// "bytes:\xe2\x80" and the like (part of a character), as OpenAI writes them.
std::string token_text(const std::string& bytes) {
    if (find_invalid_utf8(bytes) == std::string::npos) return bytes;
    std::string text = "bytes:";
    for (const unsigned char byte : bytes) {
        char escaped[5];
        std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
        text += escaped;
    }
    return text;
}

nlohmann::json byte_values(const std::string& bytes) {
    nlohmann::json values = nlohmann::json::array();
    for (const unsigned char byte : bytes) values.push_back(byte);
    return values;
}

// The logprobs of a choice (or of a stream chunk's tokens), or null when not asked for:
// completions' {tokens, token_logprobs, top_logprobs, text_offset}, chat's {content, refusal}.
nlohmann::json logprobs_json(const CompletionCall& call, const std::vector<TokenLogprobs>& tokens) {
    if (call.generations.front().logprobs < 0) return nullptr;
    if (call.chat) {
        nlohmann::json content = nlohmann::json::array();
        for (const TokenLogprobs& t : tokens) {
            nlohmann::json top = nlohmann::json::array();
            for (const TokenLogprobs::Alternative& a : t.top)
                top.push_back({{"token", token_text(a.bytes)}, {"logprob", a.logprob}, {"bytes", byte_values(a.bytes)}});
            content.push_back({{"token", token_text(t.bytes)},
                               {"logprob", t.logprob},
                               {"bytes", byte_values(t.bytes)},
                               {"top_logprobs", top}});
        }
        return {{"content", content}, {"refusal", nullptr}};
    }
    nlohmann::json texts = nlohmann::json::array(), logprobs = nlohmann::json::array(),
                   tops = nlohmann::json::array(), offsets = nlohmann::json::array();
    for (const TokenLogprobs& t : tokens) {
        texts.push_back(token_text(t.bytes));
        offsets.push_back(t.text_offset);
        if (!t.scored) {  // an echoed prompt's first token: null, as OpenAI's
            logprobs.push_back(nullptr);
            tops.push_back(nullptr);
            continue;
        }
        logprobs.push_back(t.logprob);
        nlohmann::json top = nlohmann::json::object();
        for (const TokenLogprobs::Alternative& a : t.top) top[token_text(a.bytes)] = a.logprob;
        tops.push_back(top);
    }
    return {{"tokens", texts}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

}  // namespace

nlohmann::json completion_response(const CompletionCall& call, const std::string& id, const std::string& model_name,
                                   int64_t created, const std::vector<ChoiceResult>& results) {
    nlohmann::json response = envelope(call, id, model_name, created, false);
    nlohmann::json choices = nlohmann::json::array();
    int prompt_tokens = 0, completion_tokens = 0;
    for (size_t i = 0; i < results.size(); ++i) {
        const ChoiceResult& result = results[i];
        nlohmann::json choice = {{"index", i}, {"finish_reason", api_finish_reason(result.end.reason)}};
        if (call.chat) {
            choice["message"] = {{"role", "assistant"}, {"content", result.text}};
        } else {
            choice["text"] = result.text;
        }
        choice["logprobs"] = logprobs_json(call, result.logprobs);
        choices.push_back(choice);
        prompt_tokens += result.end.prompt_tokens;
        completion_tokens += result.end.completion_tokens;
    }
    response["choices"] = choices;
    response["usage"] = usage(prompt_tokens, completion_tokens);
    return response;
}

nlohmann::json completion_chunk(const CompletionCall& call, const std::string& id, const std::string& model_name,
                                 int64_t created, const std::string& text, const std::vector<TokenLogprobs>& logprobs,
                                 const StreamUpdate* end, bool first) {
    nlohmann::json chunk = envelope(call, id, model_name, created, true);
    nlohmann::json choice = {{"index", 0},
                             {"finish_reason", end ? nlohmann::json(api_finish_reason(end->reason)) : nullptr}};
    if (call.chat) {
        nlohmann::json delta = nlohmann::json::object();
        if (first) delta["role"] = "assistant";
        if (!end) delta["content"] = text;
        choice["delta"] = delta;
    } else {
        choice["text"] = text;
    }
    choice["logprobs"] = end ? nlohmann::json(nullptr) : logprobs_json(call, logprobs);
    chunk["choices"] = nlohmann::json::array({choice});
    if (end) chunk["usage"] = usage(end->prompt_tokens, end->completion_tokens);
    return chunk;
}

std::string dump_json(const nlohmann::json& value) {
    return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dqt
