#include "data_parallel/compressed_weight_gather.h"

#include <algorithm>

#include "core/error.h"
#include "data_parallel/wire_quantizer.h"

namespace dqt {

CompressedWeightGather::CompressedWeightGather(ModelParameters& model, const ShardPlan& plan, Communicator& comm,
                                               int bits)
    : model_(model), plan_(plan), comm_(comm), bits_(bits) {
    require(bits == 8 || bits == 4, "internal error: weights compress to 8 or 4 bits, not " + std::to_string(bits));
    require(plan.ranks > 1, "internal error: compressed weights need more than one rank");
    const int rank = comm.rank();
    const float* copy = model.values.data() + plan.value_cut[rank];
    master_ = Array<float>(MemCategory::weights, plan.value_cut[rank + 1] - plan.value_cut[rank]);
    std::copy_n(copy, master_.size(), master_.data());
    wire_cut_.push_back(0);
    for (int r = 0; r < plan.ranks; ++r) {
        wire_cut_.push_back(wire_cut_.back() + wire_bytes(plan.value_cut[r + 1] - plan.value_cut[r], bits));
    }
    wire_ = Array<uint8_t>(MemCategory::weights, wire_cut_.back());
}

void CompressedWeightGather::begin_update() {
    float* shard = model_.values.data() + plan_.value_cut[comm_.rank()];
    std::swap_ranges(master_.begin(), master_.end(), shard);  // shard: master, master_: the copy
}

void CompressedWeightGather::finish_update() {
    const int rank = comm_.rank();
    float* shard = model_.values.data() + plan_.value_cut[rank];
    uint8_t* mine = wire_.data() + wire_cut_[rank];
    // master_ holds the copy: advance it by the encoded difference exactly as the other ranks will.
    encode_difference(shard, master_.data(), master_.size(), bits_, mine);
    add_decoded(mine, master_.size(), bits_, master_.data());
    std::swap_ranges(master_.begin(), master_.end(), shard);  // shard: the copy again, master_: master
    comm_.allgather_in_place(wire_.data(), wire_cut_, 1, Traffic::weights);
    for (int r = 0; r < plan_.ranks; ++r) {
        if (r == rank) continue;
        add_decoded(wire_.data() + wire_cut_[r], plan_.value_cut[r + 1] - plan_.value_cut[r], bits_,
                    model_.values.data() + plan_.value_cut[r]);
    }
}

}  // namespace dqt
