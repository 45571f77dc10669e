#include "model/gradient_accumulator.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"

namespace dqt {

void add_into(float* lower, const float* upper, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) lower[i] += upper[i];
}

GradientAccumulator::GradientAccumulator(const ModelParameters& model, int first_leaf, int leaves)
    : total_(model.layout.total) {
    const ParamLayout& layout = model.layout;
    // The tied embedding is also the head: the backward pass visits its pieces twice per leaf.
    const bool tied = model.tensors.output == model.tensors.token_embd;
    for (const ParamTensor& tensor : layout.tensors) {
        first_piece_.push_back(static_cast<int>(pieces_.size()));
        const int visits = tied && &tensor == model.tensors.token_embd ? 2 : 1;
        for (int row = 0; row < tensor.rows; row += tensor.piece_rows) {
            const size_t cols = static_cast<size_t>(tensor.cols);
            pieces_.push_back({tensor.flat_offset + row * cols,
                               tensor.flat_offset + std::min(tensor.rows, row + tensor.piece_rows) * cols, visits});
        }
    }
    acquired_.assign(pieces_.size(), 0);
    released_.assign(pieces_.size(), 0);

    // Leaf by leaf: which slot it starts in and which merges follow it.
    PairwiseSum sum;
    size_t slots = 0;
    for (int leaf = 0; leaf < leaves; ++leaf) {
        LeafPlan leaf_plan;
        leaf_plan.slot = static_cast<int>(sum.blocks().size());
        slots = std::max(slots, sum.blocks().size() + 1);
        sum.push({first_leaf + leaf, 1}, [&](int lower, int upper) { leaf_plan.merges.emplace_back(lower, upper); });
        leaves_.push_back(leaf_plan);
    }
    final_blocks_ = sum.blocks();
    slots_ = Array<float>(MemCategory::gradients, slots * total_);
}

int GradientAccumulator::piece_index(const ParamTensor& tensor, int row_begin) const {
    return first_piece_[static_cast<size_t>(tensor.tensor_id)] + row_begin / tensor.piece_rows;
}

void GradientAccumulator::begin_leaf(int leaf) {
    leaf_ = leaf;
    std::fill(acquired_.begin(), acquired_.end(), 0);
    std::fill(released_.begin(), released_.end(), 0);
}

float* GradientAccumulator::acquire(const ParamTensor& tensor, int row_begin, int) {
    const int p = piece_index(tensor, row_begin);
    float* leaf_slot = slot(leaves_[leaf_].slot);
    const GradientPiece& piece = pieces_[p];
    // Every leaf's gradient starts from zero (the first visit of the leaf clears the piece).
    if (acquired_[p]++ == 0) std::memset(leaf_slot + piece.begin, 0, (piece.end - piece.begin) * sizeof(float));
    return leaf_slot + tensor.flat_offset + static_cast<size_t>(row_begin) * tensor.cols;
}

void GradientAccumulator::release(const ParamTensor& tensor, int row_begin, int) {
    const int p = piece_index(tensor, row_begin);
    const GradientPiece& piece = pieces_[p];
    if (++released_[p] < piece.visits) return;
    for (const auto& [lower, upper] : leaves_[leaf_].merges) {
        add_into(slot(lower) + piece.begin, slot(upper) + piece.begin, piece.end - piece.begin);
    }
    if (leaf_ + 1 == static_cast<int>(leaves_.size()) && on_final_piece) on_final_piece(piece.begin, piece.end);
}

void GradientAccumulator::check_complete() const {
    for (size_t p = 0; p < pieces_.size(); ++p) {
        if (acquired_[p] != pieces_[p].visits || released_[p] != pieces_[p].visits) {
            throw Error("internal error: gradient piece " + std::to_string(p) + " visited " +
                        std::to_string(released_[p]) + " times in the last leaf, expected " +
                        std::to_string(pieces_[p].visits));
        }
    }
}

void GradientAccumulator::fold(size_t begin, size_t end) {
    for (size_t block = final_blocks_.size() - 1; block > 0; --block) {
        add_into(slot(static_cast<int>(block) - 1) + begin, slot(static_cast<int>(block)) + begin, end - begin);
    }
}

}  // namespace dqt
