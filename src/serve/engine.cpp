#include "serve/engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"

namespace dqt {

bool RequestStream::next(StreamUpdate& update, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !updates_.empty(); })) return false;
    update = std::move(updates_.front());
    updates_.pop_front();
    return true;
}

void RequestStream::push(StreamUpdate update) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        updates_.push_back(std::move(update));
    }
    ready_.notify_one();
}

Engine::Engine(const InferenceModel& model, const Tokenizer& tokenizer, const EngineOptions& options)
    : tokenizer_(tokenizer),
      context_(options.context == 0 ? model.config.seq_len : options.context),
      queue_limit_(options.queue),
      prompt_chunk_(options.prompt_chunk),
      on_step_(options.on_step) {
    require(options.parallel >= 1, "--parallel must be at least 1, got " + std::to_string(options.parallel));
    require(options.queue >= 0, "--queue must not be negative, got " + std::to_string(options.queue));
    require(options.prompt_chunk >= 1, "a prompt chunk must hold at least one token");
    require(context_ >= 2 && context_ <= model.config.seq_len,
            "--context must be from 2 to the model's " + std::to_string(model.config.seq_len) + " positions, got " +
                std::to_string(context_));
    const double pool = options.parallel * kv_cache_bytes(model.config, context_, options.cache_type);
    require(pool <= 0.8 * static_cast<double>(physical_memory_bytes()),
            std::to_string(options.parallel) + " slots of " + std::to_string(context_) + " positions need " +
                format_number(pool / (1 << 30)) + " GiB of KV cache, more than 80% of this machine's " +
                format_number(static_cast<double>(physical_memory_bytes()) / (1 << 30)) +
                " GiB: lower --parallel or --context, or use --kv-cache f16 or int8");
    slots_.resize(static_cast<size_t>(options.parallel));
    for (Slot& slot : slots_) slot.session = std::make_unique<InferenceSession>(model, context_, options.cache_type);
    // The largest step: a prompt chunk in every slot (a prompt leaves room for one new token);
    // the most rows keeping logits: an echoed prompt's scored chunk, or every slot's next token.
    const int chunk = std::min(prompt_chunk_, context_ - 1);
    workspace().reserve(options.parallel * chunk,
                        std::max(options.parallel, std::min(kScoredChunkTokens, chunk)));
    // A new thread starts with OpenMP's default team size, not the one --threads set here.
    worker_ = std::thread([this, threads = num_threads()] {
        set_num_threads(threads);
        run();
    });
}

Engine::~Engine() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    work_.notify_all();
    worker_.join();
}

std::string Engine::check_request(const GenerationRequest& request) const {
    if (request.prompt.empty()) return "the prompt is empty";
    if (static_cast<int>(request.prompt.size()) >= context_)
        return "the prompt is " + std::to_string(request.prompt.size()) + " tokens, but the context holds " +
               std::to_string(context_) + " with room for at least one new token";
    for (const int32_t token : request.prompt) {
        if (token < 0 || token >= tokenizer_.vocab_size())
            return "token " + std::to_string(token) + " is outside the vocabulary of " +
                   std::to_string(tokenizer_.vocab_size());
    }
    if (request.max_tokens < 0) return "max_tokens must not be negative";
    if (request.logprobs < -1 || request.logprobs > tokenizer_.vocab_size())
        return "logprobs alternatives must be from 0 to the vocabulary's " + std::to_string(tokenizer_.vocab_size());
    try {
        request.sampling.validate();
    } catch (const Error& e) {
        return e.what();
    }
    for (const std::string& s : request.stop) {
        if (s.empty()) return "a stop string must not be empty";
    }
    return "";
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
    std::vector<GenerationRequest> one;
    one.push_back(std::move(request));
    const std::vector<std::shared_ptr<RequestStream>> streams = submit_all(std::move(one));
    return streams.empty() ? nullptr : streams.front();
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_all(std::vector<GenerationRequest> requests) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        int free_slots = 0;
        for (const Slot& slot : slots_) free_slots += slot.busy ? 0 : 1;
        if (queue_.size() + requests.size() > static_cast<size_t>(free_slots + queue_limit_)) return {};
        for (GenerationRequest& request : requests) {
            streams.push_back(std::make_shared<RequestStream>());
            queue_.push_back({std::move(request), streams.back()});
        }
    }
    work_.notify_one();
    return streams;
}

int Engine::live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int busy = 0;
    for (const Slot& slot : slots_) busy += slot.busy ? 1 : 0;
    return busy;
}

size_t Engine::kv_pool_bytes() const {
    size_t bytes = 0;
    for (const Slot& slot : slots_) bytes += slot.session->cache().bytes();
    return bytes;
}

size_t Engine::scratch_bytes() const {
    size_t bytes = 0;
    for (const Slot& slot : slots_) bytes += slot.session->scratch_bytes();
    return bytes;
}

int Engine::waiting() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(queue_.size());
}

void Engine::release(Slot& slot) {
    slot.generation.reset();
    slot.work = Pending{};
    slot.prompt_scores.clear();
    slot.code_points = 0;
    std::lock_guard<std::mutex> lock(mutex_);
    slot.busy = false;
}

void Engine::finish(Slot& slot, StreamUpdate update) {
    // The slot is freed before its stream's last update, so a client that saw the end finds
    // the slot free.
    const std::shared_ptr<RequestStream> stream = slot.work.stream;
    update.done = true;
    if (slot.generation) {
        update.reason = slot.generation->reason();
        update.prompt_tokens = slot.generation->prompt_tokens();
        update.completion_tokens = slot.generation->generated_tokens();
    }
    release(slot);
    stream->push(std::move(update));
}

TokenLogprobs Engine::report(Slot& slot, const SampledLogprobs& logprobs) const {
    const auto bytes = [&](int32_t token) { return tokenizer_.decode(std::span<const int32_t>(&token, 1)); };
    TokenLogprobs report;
    report.bytes = bytes(logprobs.sampled.token);
    report.logprob = logprobs.sampled.logprob;
    report.text_offset = slot.code_points;
    for (const char byte : report.bytes) slot.code_points += (static_cast<unsigned char>(byte) & 0xC0) != 0x80;
    for (const TokenLogprob& alternative : logprobs.top) report.top.push_back({bytes(alternative.token), alternative.logprob});
    return report;
}

int Engine::score_prompt_chunk(Slot& slot) const {
    const std::vector<int32_t>& prompt = slot.work.request.prompt;
    std::vector<TokenLogprobs>& scores = slot.prompt_scores;
    if (scores.empty()) {  // the first token: nothing predicts it
        slot.session->reset();
        scores.push_back(report(slot, {{prompt[0], 0.0f}, {}}));
        scores.back().scored = false;
    }
    const int begin = static_cast<int>(scores.size()) - 1;  // tokens run so far
    // The last token predicts nothing within the prompt: it need not run.
    const int count = std::min({prompt_chunk_, kScoredChunkTokens, static_cast<int>(prompt.size()) - 1 - begin});
    if (count == 0) return 0;
    const int vocab = tokenizer_.vocab_size();
    const InferenceSession::BatchPart chunk{slot.session.get(), prompt.data() + begin, count, LogitRows::all};
    const float* logits = InferenceSession::run_batch(workspace(), {&chunk, 1});
    for (int r = 0; r < count; ++r) {
        const int32_t next = prompt[static_cast<size_t>(begin + r + 1)];
        scores.push_back(report(slot, sampled_logprobs(logits + static_cast<size_t>(r) * vocab, vocab, next,
                                                       slot.work.request.logprobs)));
    }
    return count;
}

void Engine::step_all() {
    EngineStep counts;
    // The step's one batch: a chunk of each prompt not yet run, and the next token of every
    // live sequence whose prompt has run (sampled from its last logits first).
    std::vector<Slot*> in_batch;
    std::vector<InferenceSession::BatchPart> parts;
    std::vector<int32_t> next_tokens(slots_.size());  // parts point into it: never reallocated
    for (size_t i = 0; i < slots_.size(); ++i) {
        Slot& slot = slots_[i];
        if (!slot.work.stream) continue;
        if (slot.work.stream->cancelled()) {
            ++cancelled_;
            release(slot);
            continue;
        }
        if (!slot.generation) {
            try {
                GenerationRequest& r = slot.work.request;
                if (r.echo && r.logprobs >= 0 && slot.prompt_scores.size() < r.prompt.size()) {
                    counts.scored_tokens += score_prompt_chunk(slot);
                    continue;
                }
                StreamUpdate echoed;
                if (r.echo) {
                    echoed.text = tokenizer_.decode(r.prompt);
                    echoed.logprobs = std::move(slot.prompt_scores);
                }
                slot.generation = std::make_unique<Generation>(*slot.session, tokenizer_, std::move(r.prompt),
                                                               r.max_tokens, r.sampling, std::move(r.stop),
                                                               std::move(r.end_tokens));
                if (r.echo) slot.work.stream->push(std::move(echoed));
            } catch (const Error& e) {
                StreamUpdate failed;
                failed.error = e.what();
                finish(slot, std::move(failed));
                continue;
            }
            if (slot.generation->finished()) {
                finish(slot, {});
                continue;
            }
        }
        Generation& generation = *slot.generation;
        if (!generation.prompt_ready()) {
            const std::span<const int32_t> chunk = generation.next_prompt_chunk(prompt_chunk_);
            parts.push_back({slot.session.get(), chunk.data(), static_cast<int>(chunk.size())});
            in_batch.push_back(&slot);
            counts.prompt_tokens += static_cast<int>(chunk.size());
            continue;
        }
        StreamUpdate piece;
        piece.text = generation.sample();
        if (slot.work.request.logprobs >= 0)
            piece.logprobs.push_back(report(slot, generation.sampled_logprobs(slot.work.request.logprobs)));
        if (generation.finished()) {
            finish(slot, std::move(piece));
            continue;
        }
        if (!piece.text.empty() || !piece.logprobs.empty()) slot.work.stream->push(std::move(piece));
        next_tokens[i] = generation.pending_token();
        parts.push_back({slot.session.get(), &next_tokens[i], 1});
        in_batch.push_back(&slot);
        ++counts.decoded_rows;
    }
    if (!parts.empty()) {
        // Requests were checked (check_request), so only a fault of the engine fails here.
        try {
            const float* logits = InferenceSession::run_batch(workspace(), parts);
            ++counts.forwards;
            const size_t vocab = static_cast<size_t>(tokenizer_.vocab_size());
            for (size_t i = 0; i < in_batch.size(); ++i) {
                Generation& generation = *in_batch[i]->generation;
                const float* row = logits + i * vocab;
                if (generation.prompt_ready()) {
                    generation.accept(row);
                } else {
                    generation.prompt_chunk_ran(row);
                }
            }
        } catch (const Error& e) {
            for (Slot* slot : in_batch) {
                StreamUpdate failed;
                failed.error = e.what();
                finish(*slot, std::move(failed));
            }
        }
    }
    if (on_step_) on_step_(counts);
}

void Engine::run() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            // Waiting requests take free slots in arrival order.
            for (Slot& slot : slots_) {
                if (slot.busy || queue_.empty()) continue;
                slot.work = std::move(queue_.front());
                queue_.pop_front();
                slot.busy = true;
            }
            const auto any_busy = [&] {
                for (const Slot& slot : slots_)
                    if (slot.busy) return true;
                return false;
            };
            work_.wait(lock, [&] { return stopping_ || any_busy() || !queue_.empty(); });
            if (stopping_) return;
            if (!any_busy()) continue;
        }
        // Only this thread changes a busy slot, so the steps run unlocked.
        step_all();
    }
}

}  // namespace dqt
