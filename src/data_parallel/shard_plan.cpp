#include "data_parallel/shard_plan.h"

#include <algorithm>

#include "model/gradient_sink.h"

namespace dqt {

namespace {

// Where flat position `cut` falls in the fp32 value array: inside the f32 tensor holding it,
// or at the start of the next f32 tensor.
size_t value_position(const ParamLayout& layout, size_t cut) {
    for (const ParamTensor& tensor : layout.tensors) {
        if (tensor.stores_codes() || tensor.flat_offset + tensor.count() <= cut) continue;
        return tensor.value_offset + (cut > tensor.flat_offset ? cut - tensor.flat_offset : 0);
    }
    return layout.value_total;
}

// The same in the code array; cuts inside a tensor are multiples of kGradientTensorAlign
// elements, so they fall on whole bytes of any packing.
size_t code_position(const ParamLayout& layout, size_t cut) {
    for (const ParamTensor& tensor : layout.tensors) {
        if (!tensor.stores_codes() || tensor.flat_offset + tensor.count() <= cut) continue;
        return tensor.code_offset + (cut > tensor.flat_offset ? tensor.traits().stored_bytes(cut - tensor.flat_offset) : 0);
    }
    return layout.code_total;
}

}  // namespace

ElementRange ShardPlan::owned(const ParamTensor& tensor, int rank) const {
    const size_t first = std::max(tensor.flat_offset, begin(rank));
    const size_t last = std::min(tensor.flat_offset + tensor.count(), end(rank));
    if (first >= last) return {};
    return {first - tensor.flat_offset, last - tensor.flat_offset};
}

std::vector<ElementRange> ShardPlan::owned_by(const ParamLayout& layout, int rank) const {
    std::vector<ElementRange> ranges;
    ranges.reserve(layout.tensors.size());
    for (const ParamTensor& tensor : layout.tensors) ranges.push_back(owned(tensor, rank));
    return ranges;
}

ShardPlan make_shard_plan(const ParamLayout& layout, int ranks) {
    ShardPlan plan;
    plan.ranks = ranks;
    const size_t chunks = (layout.total + kSquareSumChunk - 1) / kSquareSumChunk;
    for (int r = 0; r <= ranks; ++r) {
        const size_t chunk = chunks * static_cast<size_t>(r) / static_cast<size_t>(ranks);
        const size_t cut = std::min(layout.total, chunk * kSquareSumChunk);
        plan.cut.push_back(cut);
        plan.value_cut.push_back(value_position(layout, cut));
        plan.code_cut.push_back(code_position(layout, cut));
    }
    return plan;
}

}  // namespace dqt
