#include "infer/ternary_layout.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/integer_isa.h"

namespace dqt {

namespace {

void for_each_ternary_linear(InferenceModel& model, const std::function<void(InferenceLinear&)>& visit) {
    for (InferenceLayer& layer : model.layers)
        for (InferenceLinear* linear :
             {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w_gate, &layer.w_up, &layer.w_down})
            if (linear->format == LinearFormat::ternary) visit(*linear);
    if (model.head.format == LinearFormat::ternary) visit(model.head);
}

// `rows` activation rows per input width, quantized from normal values as inference quantizes.
std::map<int, Int8Rows> random_inputs(InferenceModel& model, int rows) {
    std::map<int, Int8Rows> inputs;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for_each_ternary_linear(model, [&](InferenceLinear& linear) {
        if (inputs.count(linear.cols) != 0) return;
        std::vector<float> x(static_cast<size_t>(rows) * linear.cols);  // (rows, cols)
        for (float& v : x) v = normal(rng);
        quantize_rows_int8(x.data(), rows, linear.cols, inputs[linear.cols]);
    });
    return inputs;
}

// Seconds of one product of every ternary linear in one layout, each linear's rows split over
// the threads in whole 32-row tiles, as a decode step splits them.
double pass_seconds(InferenceModel& model, const std::map<int, Int8Rows>& inputs, bool lookup) {
    std::vector<float> out;
    const auto start = std::chrono::steady_clock::now();
    for_each_ternary_linear(model, [&](InferenceLinear& linear) {
        const Int8Rows& x = inputs.at(linear.cols);
        out.resize(static_cast<size_t>(x.rows) * linear.rows);  // (x.rows, linear.rows)
#pragma omp parallel
        {
            const int threads = omp_get_num_threads(), thread = omp_get_thread_num();
            const int tiles = (linear.rows + kLookupTileRows - 1) / kLookupTileRows;
            const int begin = std::min(linear.rows, tiles * thread / threads * kLookupTileRows);
            const int end = std::min(linear.rows, tiles * (thread + 1) / threads * kLookupTileRows);
            if (lookup)
                ternary_lookup_matmul_rows(linear.lookup, x, out.data(), begin, end);
            else
                ternary_matmul_rows(linear.ternary, x, out.data(), begin, end, best_integer_isa());
        }
    });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
    std::string text = "--ternary-layout auto timed every ternary product at load";
    for (size_t i = 0; i < timings.size(); ++i) {
        char part[96];
        std::snprintf(part, sizeof part, "%s %d row%s: 2-bit %.1f ms, lookup %.1f ms", i == 0 ? ":" : ";",
                      timings[i].rows, timings[i].rows == 1 ? "" : "s", 1e3 * timings[i].two_bit_seconds,
                      1e3 * timings[i].lookup_seconds);
        text += part;
    }
    return text;
}

std::vector<TernaryLayoutTiming> hold_ternary_layout(InferenceModel& model, TernaryLayout layout,
                                                     const std::vector<int>& batch_rows) {
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
        const std::map<int, Int8Rows> inputs = random_inputs(model, rows);
        TernaryLayoutTiming timing{rows, 1e30, 1e30};
        for (int pass = 0; pass < 3; ++pass) {
            timing.two_bit_seconds = std::min(timing.two_bit_seconds, pass_seconds(model, inputs, false));
            timing.lookup_seconds = std::min(timing.lookup_seconds, pass_seconds(model, inputs, true));
        }
        lookup_wins &= timing.lookup_seconds < kLookupWinMargin * timing.two_bit_seconds;
        timings.push_back(timing);
    }
    if (lookup_wins)
        for_each_ternary_linear(model, hold_as_lookup);
    else
        for_each_ternary_linear(model, [](InferenceLinear& linear) { linear.lookup = TernaryLookupMatrix(); });
    return timings;
}

}  // namespace dqt
