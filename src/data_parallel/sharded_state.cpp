#include "data_parallel/sharded_state.h"

#include <algorithm>

namespace dqt {

namespace {

// Rank r's part of an array of per-element (or per-block) items of `item_bytes` bytes, where
// rank r owns items [first(r), first(r) + count(r)).
template <typename First, typename Count>
void gather_items(Communicator& comm, const void* mine, void* whole, size_t item_bytes, First first, Count count) {
    std::vector<size_t> offsets, sizes;
    for (int r = 0; r < comm.size(); ++r) {
        offsets.push_back(first(r) * item_bytes);
        sizes.push_back(count(r) * item_bytes);
    }
    comm.gather_to_root(mine, sizes[static_cast<size_t>(comm.rank())], whole, offsets, sizes);
}

}  // namespace

Array<float> gather_float_shards(Communicator& comm, const Array<float>& mine, const std::vector<size_t>& cut) {
    Array<float> whole;
    if (comm.is_root()) whole = Array<float>(MemCategory::scratch, cut.back());
    gather_items(comm, mine.data(), whole.data(), sizeof(float), [&](int r) { return cut[r]; },
                 [&](int r) { return cut[r + 1] - cut[r]; });
    return whole;
}

std::optional<OptimizerState> gather_optimizer_state(const ParamLayout& layout, const ShardPlan& plan,
                                                     Communicator& comm, const OptimizerState& shard) {
    std::optional<OptimizerState> whole;
    if (comm.is_root()) whole.emplace(layout, shard.requested(), MemCategory::scratch);
    for (const ParamTensor& tensor : layout.tensors) {
        const TensorMoments& mine = shard.of(tensor);
        TensorMoments* out = whole ? &whole->of(tensor) : nullptr;
        if (out) std::copy_n(mine.scale_moments, 2, out->scale_moments);  // the same on every rank
        const size_t bytes = mine.element_bytes();
        auto first = [&](int r) { return plan.owned(tensor, r).first; };
        auto count = [&](int r) { return plan.owned(tensor, r).size(); };
        gather_items(comm, mine.m.data(), out ? out->m.data() : nullptr, bytes, first, count);
        gather_items(comm, mine.v.data(), out ? out->v.data() : nullptr, bytes, first, count);
        if (tensor.residual_bits > 0) {
            gather_items(comm, mine.residual.data(), out ? out->residual.data() : nullptr, 1, first, count);
        }
        if (mine.dtype != StateDtype::q8) continue;
        auto first_block = [&](int r) { return first(r) / kStateBlock; };
        auto blocks = [&](int r) { return (count(r) + kStateBlock - 1) / kStateBlock; };
        gather_items(comm, mine.m_absmax.data(), out ? out->m_absmax.data() : nullptr, sizeof(float), first_block,
                     blocks);
        gather_items(comm, mine.v_absmax.data(), out ? out->v_absmax.data() : nullptr, sizeof(float), first_block,
                     blocks);
    }
    return whole;
}

}  // namespace dqt
