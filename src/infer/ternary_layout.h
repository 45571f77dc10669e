#pragma once
// The layout an inference model holds its ternary linears in: the 2-bit codes the kernels of
// kernels/ternary_matmul.h read (and GGUF's TQ2_0 stores), or the 1.67-bit lookup layout of
// kernels/ternary_lookup.h. A decode reads every weight once a token, so the lookup layout's
// 17% fewer bytes pay where the 2-bit decode waits on memory and the lookups keep up with it;
// where the weights sit in the cache, or on a CPU whose permutes are slow, the 2-bit decode is
// faster (docs/results.md, "The lookup layout in the model"). Which one wins is measured on the
// model itself: `fastest` times one decode-shaped product of every ternary linear in each
// layout, at the run's thread count, and keeps the faster. Both layouts give the same logits to
// the bit (exact integer sums, one float epilogue).
//
// Batches of 2 to 16 rows (dqt serve's decode steps) run 2-3x slower in the lookup layout than
// in the 2-bit one's small-batch kernel, so the choice is for single-stream decoding.
#include <string>

#include "infer/inference_model.h"

namespace dqt {

enum class TernaryLayout { two_bit, lookup, fastest };
TernaryLayout parse_ternary_layout(const std::string& name);  // "2bit", "lookup", "auto"; dqt::Error otherwise
const char* ternary_layout_name(TernaryLayout layout);

// What `fastest` measured: seconds of one decode product of every ternary linear, best of three
// passes alternated between the layouts; zero where nothing was measured.
struct TernaryLayoutTiming {
    double two_bit_seconds = 0.0;
    double lookup_seconds = 0.0;
};

// Moves model's ternary linears to `layout` (two_bit leaves them; lookup frees the 2-bit codes).
// A model without ternary linears is left alone, as is, for `fastest`, a CPU without the lookup
// kernels; `lookup` there is a dqt::Error. While `fastest` measures, both layouts are held.
TernaryLayoutTiming hold_ternary_layout(InferenceModel& model, TernaryLayout layout);

}  // namespace dqt
