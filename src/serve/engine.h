#pragma once
// The server's generation engine (continuous batching): up to `parallel` sequences live at
// once, each in a slot with its own KV cache from a pool allocated (and checked against
// memory) at start-up, beside the scratch of the largest step, and a bounded queue of
// requests waiting for a slot. One worker thread runs steps, each one batch
// (InferenceSession::run_batch), so the weights are read once per step for all its rows: the
// next chunk of each prompt not yet run (so a long prompt delays the live sequences' tokens by
// a chunk a step, not by the whole prompt) and the next token of every live sequence whose
// prompt has run; a request that ends or is cancelled frees its slot at once, and a waiting one
// takes it at the next step.
//
// Each sequence is a Generation (infer/generation.h), the class `dqt generate` runs, and a
// batch's logits are each sequence's own, bit for bit: a request gives the tokens the command
// gives, alone or beside others (test).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/tokenizer.h"
#include "infer/generation.h"
#include "infer/inference_model.h"

namespace dqt {

// What one engine step ran.
struct EngineStep {
    int prompt_tokens = 0;  // of the prompts' chunks, all slots together
    int decoded_rows = 0;   // sequences whose next token ran
    int forwards = 0;       // forward passes run: 1, or 0 when nothing was left to run
    int scored_tokens = 0;  // of echoed prompts' chunks scored beside the batch (echo with logprobs)
};

// Tokens of an echoed prompt scored a step: each keeps a vocabulary's logits, which the
// scratch reserved at start-up holds for this many rows (a prompt chunk keeps one).
inline constexpr int kScoredChunkTokens = 64;

struct EngineOptions {
    EngineOptions() = default;
    EngineOptions(int parallel_, int queue_, int context_, KvCacheType cache_type_)
        : parallel(parallel_), queue(queue_), context(context_), cache_type(cache_type_) {}

    int parallel = 4;   // slots: sequences live at once
    int queue = 16;     // requests that may wait for a slot
    int context = 0;    // positions of each slot's KV cache; 0 = the model's seq_len
    KvCacheType cache_type = KvCacheType::f32;
    // Prompt tokens a slot runs a step; `dqt generate` gives the same bits only at its chunk.
    int prompt_chunk = kPromptChunkTokens;
    std::function<void(const EngineStep&)> on_step;  // after every step, on the engine's thread
};

struct GenerationRequest {
    std::vector<int32_t> prompt;  // at least one token, fewer than the context
    int max_tokens = 16;
    SamplingOptions sampling;
    std::vector<std::string> stop;
    std::vector<int32_t> end_tokens;  // the model's end-of-generation tokens (data/special_tokens.h)
    int logprobs = -1;  // report each sampled token's log-probability and this many alternatives' (-1: none)
    bool echo = false;  // the prompt's text first (and, with logprobs, its tokens' own log-probabilities)
};

// A sampled token as a logprobs answer reports it (infer/logprobs.h): its bytes (a byte-level
// model's token may be part of a UTF-8 character), and where its text starts in the
// completion, in code points before its first byte (OpenAI's text_offset).
struct TokenLogprobs {
    struct Alternative {
        std::string bytes;
        float logprob = 0.0f;
    };
    std::string bytes;
    bool scored = true;  // false for an echoed prompt's first token, which nothing predicts (no logprobs)
    float logprob = 0.0f;
    int text_offset = 0;
    std::vector<Alternative> top;  // most likely first
};

// One update of a request's stream: a piece of text, or the end (with the reason and counts),
// or an error that ended it.
struct StreamUpdate {
    std::string text;
    std::vector<TokenLogprobs> logprobs;  // when asked: the token sampled for this update, or an echoed prompt's
    bool done = false;
    FinishReason reason = FinishReason::running;
    int prompt_tokens = 0, completion_tokens = 0;
    std::string error;  // non-empty: the request failed
};

// The channel between the engine (producer) and one request's HTTP handler (consumer).
class RequestStream {
public:
    // The next update, waiting up to `timeout`; false when none came.
    bool next(StreamUpdate& update, std::chrono::milliseconds timeout);
    // The client went away: the engine drops the request at its next step.
    void cancel() { cancelled_ = true; }
    bool cancelled() const { return cancelled_; }
    void push(StreamUpdate update);

private:
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<StreamUpdate> updates_;
    std::atomic<bool> cancelled_{false};
};

class Engine {
public:
    // Allocates the slots' caches and the scratch of the largest step (every slot's prompt chunk
    // at once), so that memory does not grow with the load; dqt::Error when the caches do not
    // fit in memory or the options are impossible (parallel < 1, queue < 0, a context beyond the
    // model's).
    Engine(const InferenceModel& model, const Tokenizer& tokenizer, const EngineOptions& options);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // The request's stream, or nullptr when every slot is busy and the queue is full. The
    // request must already be valid for this engine (check_request).
    std::shared_ptr<RequestStream> submit(GenerationRequest request);
    // Several requests at once, all or none: their streams in order, or none when the free
    // slots and queue places cannot take them all.
    std::vector<std::shared_ptr<RequestStream>> submit_all(std::vector<GenerationRequest> requests);
    // An empty string, or why `request` cannot run here (a prompt that leaves no room, ...).
    std::string check_request(const GenerationRequest& request) const;

    int context() const { return context_; }
    int parallel() const { return static_cast<int>(slots_.size()); }
    int live() const;    // sequences in slots now
    int waiting() const;  // requests in the queue
    int queue_limit() const { return queue_limit_; }  // requests that may wait for a slot
    int64_t cancelled() const { return cancelled_; }  // requests dropped because their client left
    // Memory of the slots' caches, and of their sessions' forward scratch; read them while no
    // request runs (the engine's thread may be growing the scratch).
    size_t kv_pool_bytes() const;
    size_t scratch_bytes() const;

private:
    struct Pending {
        GenerationRequest request;
        std::shared_ptr<RequestStream> stream;
    };
    struct Slot {
        std::unique_ptr<InferenceSession> session;
        std::unique_ptr<Generation> generation;  // null while the slot is free or before its request started
        Pending work;
        std::vector<TokenLogprobs> prompt_scores;  // an echoed prompt's, while it is scored
        int code_points = 0;  // in the bytes of the tokens reported so far (TokenLogprobs::text_offset)
        bool busy = false;
    };
    void run();
    // One step of every busy slot, in one batch: a chunk of each prompt not yet run, and the
    // next token of every live sequence whose prompt has run; frees each slot whose request ends.
    void step_all();
    // Ends the slot's request with `update` (its end, or an error) and frees the slot.
    void finish(Slot& slot, StreamUpdate update);
    void release(Slot& slot);
    // A token as the slot's request's logprobs answer reports it; advances the slot's text offset.
    TokenLogprobs report(Slot& slot, const SampledLogprobs& logprobs) const;
    // Every step runs in the first slot's session's scratch, reserved at start-up for the
    // largest step; the other slots' sessions hold only their caches.
    InferenceSession& workspace() const { return *slots_.front().session; }
    // Scores the next chunk of an echoed prompt's own tokens (echo with logprobs): token i's
    // log-probability under the logits after tokens [0, i), from a run of the chunk (at most
    // kScoredChunkTokens) in the slot's own cache with every row's logits, beside the step's
    // batch, one chunk a step.
    // Once every token is scored the generation starts and runs the prompt again, as it would
    // without echo, so the tokens it gives do not change. Returns the tokens scored.
    int score_prompt_chunk(Slot& slot) const;

    const Tokenizer& tokenizer_;
    const int context_;
    const int queue_limit_;
    const int prompt_chunk_;
    const std::function<void(const EngineStep&)> on_step_;
    std::vector<Slot> slots_;
    mutable std::mutex mutex_;  // guards queue_, the busy flags and stopping_
    std::condition_variable work_;
    std::deque<Pending> queue_;
    bool stopping_ = false;
    std::atomic<int64_t> cancelled_{0};
    std::thread worker_;
};

}  // namespace dqt
