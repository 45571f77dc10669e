#include "infer/ternary_layout.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "core/error.h"

namespace dqt {

namespace {

// Every linear held as ternary codes, in either layout.
void for_each_ternary_linear(InferenceModel& model, const std::function<void(InferenceLinear&)>& visit) {
    auto ternary = [](const InferenceLinear& linear) {
        return linear.format == LinearFormat::ternary || linear.format == LinearFormat::ternary_lookup;
    };
    for (InferenceLayer& layer : model.layers)
        for (InferenceLinear* linear :
             {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w_gate, &layer.w_up, &layer.w_down})
            if (ternary(*linear)) visit(*linear);
    if (ternary(model.head)) visit(model.head);
}

// Points every ternary linear at one layout; both must be held.
void use_layout(InferenceModel& model, bool lookup) {
    for_each_ternary_linear(model, [&](InferenceLinear& linear) {
        linear.format = lookup ? LinearFormat::ternary_lookup : LinearFormat::ternary;
    });
}

// `rows` sequences decoded together, as a run decodes them: one alone (generate, a single
// stream), several in one batched step (dqt serve's slots).
class DecodeSteps {
public:
    DecodeSteps(const InferenceModel& model, int rows, int max_seq, KvCacheType cache_type)
        : vocab_(model.config.vocab_size), tokens_(static_cast<size_t>(rows)) {
        for (int row = 0; row < rows; ++row) {
            sessions_.push_back(std::make_unique<InferenceSession>(model, max_seq, cache_type));
            parts_.push_back({sessions_.back().get(), &tokens_[static_cast<size_t>(row)], 1});
        }
    }
    int max_seq() const { return sessions_.front()->max_seq(); }

    // Seconds per step of `steps` decode steps from a fresh sequence, after one untimed step, so
    // that the caches hold what the layout's own steps leave in them (the other layout's steps
    // ran just before); a context too short for it gets the timed steps only.
    double seconds_per_step(int steps) {
        for (const auto& session : sessions_) session->reset();
        int position = 0;
        if (max_seq() > steps) step(position++);
        const auto start = std::chrono::steady_clock::now();
        for (int timed = 0; timed < steps; ++timed) step(position++);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
    }

private:
    // Any tokens in the vocabulary do: every step reads every weight whatever the token.
    void step(int position) {
        for (size_t row = 0; row < tokens_.size(); ++row)
            tokens_[row] = static_cast<int32_t>((position * 131 + row * 17 + 7) % vocab_);
        if (parts_.size() == 1)
            sessions_[0]->run(tokens_.data(), 1, LogitRows::last);
        else
            InferenceSession::run_batch(*sessions_[0], parts_);
    }

    int vocab_;
    std::vector<int32_t> tokens_;  // (rows) this step's token of each sequence
    std::vector<std::unique_ptr<InferenceSession>> sessions_;
    std::vector<InferenceSession::BatchPart> parts_;  // (rows) a session and its token each
};

// Decode steps of `rows` sequences in both layouts, alternated, best of kTimedPasses each. A
// pass runs enough steps to last about kPassSeconds (at most the context allows), so that a
// small model's sub-millisecond steps still give a steady figure.
TernaryLayoutTiming time_layouts(InferenceModel& model, int rows, KvCacheType cache_type) {
    constexpr int kTimedPasses = 5;
    constexpr double kPassSeconds = 0.02;
    DecodeSteps decode(model, rows, std::min(model.config.seq_len, 65), cache_type);
    const int most_steps = std::max(1, decode.max_seq() - 1);
    use_layout(model, false);
    const double first = decode.seconds_per_step(1);
    const int steps = std::clamp(static_cast<int>(kPassSeconds / std::max(first, 1e-9)) + 1, 1, most_steps);
    TernaryLayoutTiming timing{rows, 1e30, 1e30};
    for (int pass = 0; pass < kTimedPasses; ++pass)
        for (const bool lookup : {pass % 2 == 1, pass % 2 == 0}) {  // who goes first alternates too
            use_layout(model, lookup);
            double& best = lookup ? timing.lookup_seconds : timing.two_bit_seconds;
            best = std::min(best, decode.seconds_per_step(steps));
        }
    return timing;
}

void hold_as_lookup(InferenceLinear& linear) {
    if (linear.lookup.packed.size() == 0) linear.lookup = pack_ternary_lookup(linear.ternary);
    linear.ternary = TernaryMatrix();
    linear.format = LinearFormat::ternary_lookup;
}

}  // namespace

TernaryLayout parse_ternary_layout(const std::string& name) {
    if (name == "2bit") return TernaryLayout::two_bit;
    if (name == "lookup") return TernaryLayout::lookup;
    if (name == "auto") return TernaryLayout::fastest;
    throw Error("unknown ternary layout '" + name + "' (known: auto, 2bit, lookup)");
}

const char* ternary_layout_name(TernaryLayout layout) {
    switch (layout) {
        case TernaryLayout::two_bit: return "2bit";
        case TernaryLayout::lookup: return "lookup";
        case TernaryLayout::fastest: break;
    }
    return "auto";
}

std::string describe_layout_timings(const std::vector<TernaryLayoutTiming>& timings) {
    std::string text = "--ternary-layout auto timed decode steps at load";
    for (size_t i = 0; i < timings.size(); ++i) {
        char part[96];
        std::snprintf(part, sizeof part, "%s %d row%s: 2-bit %.2f ms, lookup %.2f ms a step", i == 0 ? ":" : ";",
                      timings[i].rows, timings[i].rows == 1 ? "" : "s", 1e3 * timings[i].two_bit_seconds,
                      1e3 * timings[i].lookup_seconds);
        text += part;
    }
    return text;
}

std::vector<TernaryLayoutTiming> hold_ternary_layout(InferenceModel& model, TernaryLayout layout,
                                                     const std::vector<int>& batch_rows, KvCacheType cache_type) {
    bool any_ternary = false;
    for_each_ternary_linear(model, [&](InferenceLinear&) { any_ternary = true; });
    if (!any_ternary || layout == TernaryLayout::two_bit) return {};
    if (layout == TernaryLayout::lookup) {
        require(ternary_lookup_supported(), "--ternary-layout lookup needs AVX-512 VNNI and VL, which this CPU lacks");
        for_each_ternary_linear(model, hold_as_lookup);
        return {};
    }
    if (!ternary_lookup_supported()) return {};
    std::vector<int> sizes = batch_rows;
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    require(!sizes.empty() && sizes.front() >= 1, "hold_ternary_layout: batch sizes must be at least 1");
    for_each_ternary_linear(model, [](InferenceLinear& linear) { linear.lookup = pack_ternary_lookup(linear.ternary); });
    std::vector<TernaryLayoutTiming> timings;
    bool lookup_wins = true;
    for (const int rows : sizes) {
        const TernaryLayoutTiming timing = time_layouts(model, rows, cache_type);
        lookup_wins &= timing.lookup_seconds < kLookupWinMargin * timing.two_bit_seconds;
        timings.push_back(timing);
    }
    use_layout(model, false);
    if (lookup_wins)
        for_each_ternary_linear(model, hold_as_lookup);
    else
        for_each_ternary_linear(model, [](InferenceLinear& linear) { linear.lookup = TernaryLookupMatrix(); });
    return timings;
}

}  // namespace dqt
