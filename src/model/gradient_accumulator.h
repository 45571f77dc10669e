#pragma once
// A step's gradient, accumulated over its micro-batches ("leaves") in the fixed pairwise order
// of core/pairwise_sum.h, on one process and under mpirun alike:
//  - every leaf's gradient starts from zero in its own stack slot (a whole-model flat buffer,
//    laid out by ParamTensor::flat_offset), and the pairwise merges run piece by piece as the
//    backward pass releases each piece (model/gradient_sink.h);
//  - when the last leaf releases a piece, the piece is final on this process: a data-parallel
//    transport (data_parallel/gradient_exchange.h) hears of it through on_final_piece and
//    starts sending it while the backward pass goes on. On one process nobody listens.
// This process runs leaves [first_leaf, first_leaf + leaves) of the step: all of them on one
// process; a rank's share under mpirun.
#include <cstddef>
#include <functional>
#include <vector>

#include "core/memory.h"
#include "core/pairwise_sum.h"
#include "model/gradient_sink.h"
#include "model/parameters.h"

namespace dqt {

// Flat positions [begin, end) of one gradient piece (model/gradient_sink.h).
struct GradientPiece {
    size_t begin, end;
    int visits;  // acquire/release pairs per leaf (the tied embedding gets two)
};

class GradientAccumulator : public GradientSink {
public:
    GradientAccumulator(const ModelParameters& model, int first_leaf, int leaves);

    // Before the backward pass of local leaf `leaf` (0 .. leaves - 1).
    void begin_leaf(int leaf);
    float* acquire(const ParamTensor& tensor, int row_begin, int row_end) override;
    void release(const ParamTensor& tensor, int row_begin, int row_end) override;
    // Flat positions [begin, end) became final (the last leaf released them).
    std::function<void(size_t begin, size_t end)> on_final_piece;

    // After the last leaf: throws an internal error unless the backward pass visited every
    // piece as often as the layout says (a skipped or repeated piece would corrupt the sum).
    void check_complete() const;
    // The maximal aligned blocks of this process's leaves, finished subtrees of the step's
    // tree; block i lives in slot(i).
    const std::vector<LeafBlock>& final_blocks() const { return final_blocks_; }
    float* slot(int i) const { return slots_.data() + static_cast<size_t>(i) * total_; }
    // Flat positions [begin, end) of every block folded into slot 0, from the top down as
    // PairwiseSum::fold does: on one process, the step's gradient.
    void fold(size_t begin, size_t end);
    // Every piece in flat order.
    const std::vector<GradientPiece>& pieces() const { return pieces_; }

private:
    struct LeafPlan {
        int slot;                                 // stack slot the leaf's gradient starts in
        std::vector<std::pair<int, int>> merges;  // (lower, upper) slots, after the leaf
    };
    int piece_index(const ParamTensor& tensor, int row_begin) const;

    size_t total_ = 0;              // layout.total
    std::vector<GradientPiece> pieces_;
    std::vector<int> first_piece_;  // (tensors) index of each tensor's first piece
    std::vector<LeafPlan> leaves_;
    std::vector<LeafBlock> final_blocks_;
    Array<float> slots_;            // (slots, layout.total) category gradients
    int leaf_ = 0;
    std::vector<int> acquired_, released_;  // (pieces) visits in the current leaf
};

// lower[i] += upper[i] for i < count (the merges of a pairwise sum).
void add_into(float* lower, const float* upper, size_t count);

}  // namespace dqt
