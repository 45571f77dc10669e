#include "infer/generation.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "core/rng.h"

namespace dqt {

const char* finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::running: return "running";
        case FinishReason::length: return "length";
        case FinishReason::stop: return "stop";
        case FinishReason::context: return "context";
    }
    return "?";
}

Generation::Generation(InferenceSession& session, const Tokenizer& tokenizer, std::vector<int32_t> prompt,
                       int max_new_tokens, const SamplingOptions& sampling, std::vector<std::string> stop,
                       std::vector<int32_t> end_tokens)
    : session_(session),
      tokenizer_(tokenizer),
      vocab_(tokenizer.vocab_size()),
      prompt_(std::move(prompt)),
      sampling_(sampling),
      stop_(std::move(stop)),
      end_tokens_(std::move(end_tokens)) {
    require(max_new_tokens >= 0, "the number of new tokens must not be negative");
    sampling_.validate();
    require(!prompt_.empty(), "the prompt is empty: give at least one character");
    for (const std::string& s : stop_) require(!s.empty(), "a stop string must not be empty");
    const int room = session.max_seq() - static_cast<int>(prompt_.size());
    if (room < 1)
        throw Error("the prompt is " + std::to_string(prompt_.size()) + " tokens, but the context holds " +
                    std::to_string(session.max_seq()) + " with room for one new token: shorten the prompt");
    budget_ = std::min(max_new_tokens, room);
    budget_is_context_ = room < max_new_tokens;
    session_.reset();
    if (budget_ == 0) reason_ = FinishReason::length;
}

std::span<const int32_t> Generation::next_prompt_chunk(int max_tokens) const {
    require(max_tokens >= 1 && !prompt_ready(), "Generation::next_prompt_chunk: no prompt left, or an empty chunk");
    const int count = std::min(max_tokens, static_cast<int>(prompt_.size()) - prompt_run_);
    return {prompt_.data() + prompt_run_, static_cast<size_t>(count)};
}

void Generation::prompt_chunk_ran(const float* last_logits) {
    require(!prompt_ready() && session_.position() > prompt_run_,
            "Generation::prompt_chunk_ran: no chunk of the prompt ran in the session");
    prompt_run_ = session_.position();
    logits_ = last_logits;
}

void Generation::run_prompt_chunk(int max_tokens) {
    const std::span<const int32_t> chunk = next_prompt_chunk(max_tokens);
    prompt_chunk_ran(session_.run(chunk.data(), static_cast<int>(chunk.size()), LogitRows::last));
}

namespace {

// Bytes at the end of `text` that begin a UTF-8 character still missing its continuation
// bytes (0 when the text ends on a whole character or on bytes that are not UTF-8 at all).
size_t incomplete_utf8_tail(const std::string& text) {
    for (size_t back = 1; back <= std::min<size_t>(3, text.size()); ++back) {
        const auto byte = static_cast<unsigned char>(text[text.size() - back]);
        if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
        return length > back ? back : 0;
    }
    return 0;
}

}  // namespace

size_t Generation::safe_end() const {
    size_t hold = incomplete_utf8_tail(text_);
    for (const std::string& s : stop_) {
        // The longest proper prefix of s that text_ ends with.
        for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k) {
            if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return text_.size() - hold;
}

std::string Generation::step() {
    while (!prompt_ready()) run_prompt_chunk(kPromptChunkTokens);
    std::string piece = sample();
    if (!finished()) accept(session_.run(&generated_.back(), 1, LogitRows::last));
    return piece;
}

std::string Generation::sample() {
    require(prompt_ready() && !finished() && !awaiting_logits_,
            "Generation::sample: the prompt has not run, or the generation has finished or awaits logits");
    const float u = uniform01(sampling_.seed, kStreamSample, static_cast<uint32_t>(session_.position()), 0);
    const int32_t next = sample_token(logits_, vocab_, sampling_, u);
    generated_.push_back(next);
    if (std::find(end_tokens_.begin(), end_tokens_.end(), next) != end_tokens_.end()) {
        reason_ = FinishReason::stop;
        std::string rest = text_.substr(shown_);
        shown_ = text_.size();
        return rest;
    }
    // Decoding is token by token (Tokenizer::decode), and only the new text's end can
    // complete a stop string: each step costs its own token, not the continuation so far.
    const size_t old_size = text_.size();
    text_ += tokenizer_.decode(std::span<const int32_t>(&next, 1));
    size_t cut = std::string::npos;
    for (const std::string& s : stop_) {
        const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
        cut = std::min(cut, text_.find(s, from));
    }
    if (cut != std::string::npos) {
        text_.resize(std::max(cut, shown_));
        reason_ = FinishReason::stop;
    } else if (generated_tokens() == budget_) {
        reason_ = budget_is_context_ ? FinishReason::context : FinishReason::length;
    } else {
        awaiting_logits_ = true;
    }
    const size_t end = finished() ? text_.size() : safe_end();
    std::string piece = end > shown_ ? text_.substr(shown_, end - shown_) : std::string();
    shown_ = std::max(shown_, end);
    return piece;
}

SampledLogprobs Generation::sampled_logprobs(int top) const {
    require(!generated_.empty() && (awaiting_logits_ || finished()),
            "Generation::sampled_logprobs: no token was sampled since the last accept()");
    return dqt::sampled_logprobs(logits_, vocab_, generated_.back(), top);
}

void Generation::accept(const float* logits) {
    require(awaiting_logits_, "Generation::accept: no token was sampled");
    logits_ = logits;
    awaiting_logits_ = false;
}

}  // namespace dqt
