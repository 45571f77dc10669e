#pragma once
// One sequence's generation, a token at a time, in an inference session the caller owns.
// `dqt generate` and each slot of `dqt serve` drive this same class, so a request gives the
// tokens the command gives for the same prompt, sampling options and seed.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "infer/logprobs.h"
#include "infer/sampling.h"
#include "infer/session.h"

namespace dqt {

enum class FinishReason {
    running,
    length,   // max_new_tokens generated
    stop,     // a stop string appeared (it and what follows it are not part of the text), or an
              // end-of-generation token was sampled (its text is not part of it)
    context,  // the session is full
};
const char* finish_reason_name(FinishReason reason);

// A prompt runs in chunks of at most this many tokens, in `dqt generate` and in `dqt serve`
// alike (so both give the same bits): the server runs one chunk of a new prompt per engine
// step, between the live sequences' tokens, so a long prompt does not stall them (llama.cpp's
// default micro-batch is as long).
inline constexpr int kPromptChunkTokens = 512;

class Generation {
public:
    // Resets `session`; the prompt runs in chunks (run_prompt_chunk, or all of them at the first
    // step()). dqt::Error (nothing run) for an empty prompt, one that leaves the session no room
    // for a new token, or an empty stop string.
    // end_tokens: the model's end-of-generation tokens (data/special_tokens.h).
    Generation(InferenceSession& session, const Tokenizer& tokenizer, std::vector<int32_t> prompt, int max_new_tokens,
               const SamplingOptions& sampling, std::vector<std::string> stop = {},
               std::vector<int32_t> end_tokens = {});
    Generation(const Generation&) = delete;
    Generation& operator=(const Generation&) = delete;

    // Runs the prompt's next chunk of at most `max_tokens` tokens (the whole prompt's logits
    // are ready once prompt_ready()).
    void run_prompt_chunk(int max_tokens);
    // run_prompt_chunk in two halves, for a caller that runs the chunk in a batch with other
    // sequences' rows (InferenceSession::run_batch): the chunk's tokens, then, once they ran in
    // session(), the next-token logits (V) of its last token.
    std::span<const int32_t> next_prompt_chunk(int max_tokens) const;
    void prompt_chunk_ran(const float* last_logits);
    bool prompt_ready() const { return prompt_run_ == static_cast<int>(prompt_.size()); }

    // Runs what is left of the prompt, then samples the next token and, unless the generation
    // then ends, runs it. Returns the text
    // that became safe to show: possibly empty (half a UTF-8 character, or text that may be
    // the start of a stop string, is held back until the next token settles it; the last
    // step shows all that is left).
    std::string step();

    // step() in two halves, for a caller that runs several generations' tokens together
    // (InferenceSession::run_batch), once prompt_ready(): sample() picks the next token and returns the text
    // step() would; unless the generation then finished, the caller runs pending_token() in
    // session() and hands its next-token logits (V) to accept().
    std::string sample();
    int32_t pending_token() const { return generated_.back(); }
    InferenceSession& session() { return session_; }
    void accept(const float* logits);
    // The log-probabilities of the token the last sample() picked, from the logits it was
    // picked from, with `top` alternatives (infer/logprobs.h); call before accept().
    SampledLogprobs sampled_logprobs(int top) const;

    bool finished() const { return reason_ != FinishReason::running; }
    FinishReason reason() const { return reason_; }
    int prompt_tokens() const { return static_cast<int>(prompt_.size()); }
    int generated_tokens() const { return static_cast<int>(generated_.size()); }
    const std::vector<int32_t>& generated() const { return generated_; }
    // The continuation so far, cut before a stop string.
    const std::string& text() const { return text_; }

private:
    // Where text_ may be shown up to: its end, less a tail that could begin a stop string or
    // is half a UTF-8 character (so every piece shown holds whole characters).
    size_t safe_end() const;

    InferenceSession& session_;
    const Tokenizer& tokenizer_;
    const int vocab_;
    std::vector<int32_t> prompt_, generated_;
    int prompt_run_ = 0;  // prompt tokens run so far
    SamplingOptions sampling_;
    std::vector<std::string> stop_;
    std::vector<int32_t> end_tokens_;
    int budget_ = 0;  // new tokens this generation may make: max_new_tokens, less where the session ends
    bool budget_is_context_ = false;
    const float* logits_ = nullptr;  // (V) the next token's, valid while running once the prompt has run
    bool awaiting_logits_ = false;   // sample() ran; accept() has not
    std::string text_;
    size_t shown_ = 0;  // bytes of text_ returned by step()
    FinishReason reason_ = FinishReason::running;
};

}  // namespace dqt
