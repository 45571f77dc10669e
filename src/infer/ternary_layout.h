#pragma once
// The layout an inference model holds its ternary linears in: the 2-bit codes the kernels of
// kernels/ternary_matmul.h read (and GGUF's TQ2_0 stores), or the 1.67-bit lookup layout of
// kernels/ternary_lookup.h. A decode reads every weight once a token, so the lookup layout's
// 17% fewer bytes pay where the 2-bit decode waits on memory and the lookups keep up with it;
// where the weights sit in the cache, or on a CPU whose permutes are slow, the 2-bit decode is
// faster (docs/results.md, "The lookup layout in the model"). Which one wins is measured on the
// model itself: `fastest` times decode steps in each layout at each batch size the command runs
// (one sequence for a single stream's decode; dqt serve's steps also batch up to --parallel
// sequences, where the lookup layout ran 2-3x slower than the 2-bit small-batch kernel), at the
// run's thread count and KV cache type, and keeps the lookup layout only where it wins at all of
// them. Whole steps, because timing the ternary products alone misranked the layouts on a Zen 5
// (docs/results.md, "On a Zen 5 again: the lookup layout"). Both layouts give the same logits
// to the bit (exact integer sums, one float epilogue).
#include <string>
#include <vector>

#include "infer/inference_model.h"
#include "infer/session.h"

namespace dqt {

enum class TernaryLayout { two_bit, lookup, fastest };
TernaryLayout parse_ternary_layout(const std::string& name);  // "2bit", "lookup", "auto"; dqt::Error otherwise
const char* ternary_layout_name(TernaryLayout layout);

// `fastest` keeps the lookup layout only where it takes less than this share of the 2-bit
// layout's time, so that timing noise does not flip a tie.
inline constexpr double kLookupWinMargin = 0.98;

// What `fastest` measured at one batch size: seconds of one decode step of `rows` sequences
// together, best of five passes alternated between the layouts.
struct TernaryLayoutTiming {
    int rows = 0;
    double two_bit_seconds = 0.0;
    double lookup_seconds = 0.0;
};

// Moves model's ternary linears to `layout` (two_bit leaves them; lookup frees the 2-bit codes).
// `fastest` times the layouts at each of batch_rows (each >= 1) and returns what it measured;
// nothing is measured, and the result is empty, for the other layouts, a model without ternary
// linears (left alone), or a CPU without the lookup kernels (left in 2 bits; `lookup` there is a
// dqt::Error). While `fastest` measures, both layouts are held.
std::vector<TernaryLayoutTiming> hold_ternary_layout(InferenceModel& model, TernaryLayout layout,
                                                     const std::vector<int>& batch_rows, KvCacheType cache_type);

// For people: "--ternary-layout auto timed decode steps at load: 1 row: 2-bit 18.41 ms, lookup
// 17.96 ms a step; 4 rows: ...".
std::string describe_layout_timings(const std::vector<TernaryLayoutTiming>& timings);

}  // namespace dqt
