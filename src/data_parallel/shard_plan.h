#pragma once
// How N data-parallel ranks split the optimizer's work (ZeRO-1): rank r owns positions
// [cut[r], cut[r+1]) of the flat gradient layout (ParamLayout::offset), the Adam moments of
// those elements, their update, and the slices of the weight arrays that hold them.
//
// Cuts fall on multiples of kSquareSumChunk (model/gradient_sink.h): each chunk of the
// gradient-norm sum lies on one rank, so the norm has the same bits for any N. Tensors start
// on kGradientTensorAlign in the layout, so a cut is also a whole 8-bit state block and a
// whole packed code byte inside the tensor it falls in.
#include <cstddef>
#include <vector>

#include "model/parameters.h"

namespace dqt {

struct ShardPlan {
    int ranks = 1;
    std::vector<size_t> cut;         // (ranks + 1) positions in the flat gradient layout
    std::vector<size_t> value_cut;   // (ranks + 1) the same cuts in ModelParameters::values, floats
    std::vector<size_t> code_cut;    // (ranks + 1) the same cuts in ModelParameters::codes, bytes

    size_t begin(int rank) const { return cut[static_cast<size_t>(rank)]; }
    size_t end(int rank) const { return cut[static_cast<size_t>(rank) + 1]; }
    // Flat positions outside `rank`'s share (what its gradient residual holds, compressed transfers).
    size_t outside(int rank) const { return cut.back() - (end(rank) - begin(rank)); }
    // The elements of `tensor` that `rank` owns.
    ElementRange owned(const ParamTensor& tensor, int rank) const;
    // owned() for every tensor of the layout (OptimizerState's shape on `rank`).
    std::vector<ElementRange> owned_by(const ParamLayout& layout, int rank) const;
};

// Near-equal shares of the layout, cut on kSquareSumChunk boundaries (a share may be empty
// when the model has fewer chunks than ranks).
ShardPlan make_shard_plan(const ParamLayout& layout, int ranks);

}  // namespace dqt
