#include "data_parallel/gradient_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "data_parallel/wire_quantizer.h"

namespace dqt {

namespace {

// lower[i] += upper[i] for i < count.
void add_into(float* lower, const float* upper, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) lower[i] += upper[i];
}

}  // namespace

GradientExchange::GradientExchange(const ModelParameters& model, const ShardPlan& plan, Communicator& comm,
                                   int leaves_per_rank, int compress_bits)
    : plan_(plan),
      comm_(comm),
      rank_(comm.rank()),
      leaves_per_rank_(leaves_per_rank),
      compress_bits_(plan.ranks > 1 ? compress_bits : 0) {
    require(compress_bits == 0 || compress_bits == 8 || compress_bits == 4,
            "internal error: gradients compress to 8 or 4 bits, not " + std::to_string(compress_bits));
    const ParamLayout& layout = model.layout;
    shard_begin_ = plan.begin(rank_);
    shard_end_ = plan.end(rank_);
    // The tied embedding is also the head: the backward pass visits its pieces twice per leaf.
    const bool tied = model.tensors.output == model.tensors.token_embd;
    for (const ParamTensor& tensor : layout.tensors) {
        const int rows = gradient_piece_rows(layout, tensor);
        first_piece_.push_back(static_cast<int>(pieces_.size()));
        piece_rows_.push_back(rows);
        const int visits = tied && &tensor == model.tensors.token_embd ? 2 : 1;
        for (int row = 0; row < tensor.rows; row += rows) {
            const size_t cols = static_cast<size_t>(tensor.cols);
            pieces_.push_back({tensor.flat_offset + row * cols,
                               tensor.flat_offset + std::min(tensor.rows, row + rows) * cols, visits});
        }
    }
    acquired_.assign(pieces_.size(), 0);
    released_.assign(pieces_.size(), 0);

    // Leaf by leaf: which slot it starts in and which merges follow it.
    const int first_leaf = rank_ * leaves_per_rank;
    PairwiseSum sum;
    size_t slots = 0;
    for (int leaf = 0; leaf < leaves_per_rank; ++leaf) {
        LeafPlan leaf_plan;
        leaf_plan.slot = static_cast<int>(sum.blocks().size());
        slots = std::max(slots, sum.blocks().size() + 1);
        sum.push({first_leaf + leaf, 1}, [&](int lower, int upper) { leaf_plan.merges.emplace_back(lower, upper); });
        leaves_.push_back(leaf_plan);
    }
    final_blocks_ = sum.blocks();
    total_ = layout.total;
    slots_ = Array<float>(MemCategory::gradients, slots * total_);

    for (int from = 0; from < plan.ranks; ++from) {
        first_region_.push_back(received_from_.size());
        if (from == rank_) continue;
        // Compressed: one part per rank, summed on the sender.
        const size_t blocks =
            compress_bits_ ? 1 : aligned_blocks(from * leaves_per_rank, (from + 1) * leaves_per_rank).size();
        received_from_.insert(received_from_.end(), blocks, from);
    }
    const size_t shard = shard_end_ - shard_begin_;
    received_ = Array<float>(MemCategory::gradients, received_from_.size() * shard);
    if (compress_bits_) {
        residual_ = Array<float>(MemCategory::gradients, plan.outside(rank_));
        size_t send_bytes = 0, recv_bytes = 0;  // of a whole step
        for (const Piece& piece : pieces_) {
            for (int other = 0; other < plan.ranks; ++other) {
                if (other == rank_) continue;
                const size_t first = std::max(piece.begin, plan.begin(other)), last = std::min(piece.end, plan.end(other));
                if (first < last) send_bytes += wire_bytes(last - first, compress_bits_);
                const size_t mine_first = std::max(piece.begin, shard_begin_), mine_last = std::min(piece.end, shard_end_);
                if (mine_first < mine_last) recv_bytes += wire_bytes(mine_last - mine_first, compress_bits_);
            }
        }
        send_wire_ = Array<uint8_t>(MemCategory::gradients, send_bytes);
        recv_wire_ = Array<uint8_t>(MemCategory::gradients, recv_bytes);
        return;
    }

    // What reduce() sums, in leaf order: every rank's blocks and where this shard's part of each is.
    for (int from = 0; from < plan.ranks; ++from) {
        const std::vector<LeafBlock> blocks = aligned_blocks(from * leaves_per_rank, (from + 1) * leaves_per_rank);
        for (size_t block = 0; block < blocks.size(); ++block) {
            shard_blocks_.push_back(blocks[block]);
            shard_parts_.push_back(from == rank_ ? slot_data(static_cast<int>(block)) + shard_begin_
                                                 : received_.data() + (first_region_[from] + block) * shard);
        }
    }
}

int GradientExchange::piece_index(const ParamTensor& tensor, int row_begin) const {
    const size_t id = static_cast<size_t>(tensor.tensor_id);
    return first_piece_[id] + row_begin / piece_rows_[id];
}

void GradientExchange::begin_leaf(int leaf) {
    leaf_ = leaf;
    if (leaf == 0) {
        send_used_ = recv_used_ = 0;
        received_parts_.clear();
    }
    std::fill(acquired_.begin(), acquired_.end(), 0);
    std::fill(released_.begin(), released_.end(), 0);
}

float* GradientExchange::acquire(const ParamTensor& tensor, int row_begin, int row_end) {
    const int p = piece_index(tensor, row_begin);
    float* slot = slot_data(leaves_[leaf_].slot);
    const Piece& piece = pieces_[p];
    // Every leaf's gradient starts from zero (the first visit of the leaf clears the piece).
    if (acquired_[p]++ == 0) std::memset(slot + piece.begin, 0, (piece.end - piece.begin) * sizeof(float));
    return slot + tensor.flat_offset + static_cast<size_t>(row_begin) * tensor.cols;
}

void GradientExchange::release(const ParamTensor& tensor, int row_begin, int row_end) {
    const int p = piece_index(tensor, row_begin);
    const Piece& piece = pieces_[p];
    if (++released_[p] < piece.visits) return;
    for (const auto& [lower, upper] : leaves_[leaf_].merges) {
        add_into(slot_data(lower) + piece.begin, slot_data(upper) + piece.begin, piece.end - piece.begin);
    }
    if (leaf_ == leaves_per_rank_ - 1) exchange_final_piece(piece);
    comm_.progress();
}

void GradientExchange::exchange_final_piece(const Piece& piece) {
    if (plan_.ranks == 1) return;
    if (compress_bits_) {
        exchange_compressed_piece(piece);
        return;
    }
    // To each rank, its part of the piece from every block this rank holds (one slot apart);
    // from each rank, its blocks of this rank's part (one shard-sized region apart).
    const size_t shard = shard_end_ - shard_begin_;
    const size_t my_first = std::max(piece.begin, shard_begin_), my_last = std::min(piece.end, shard_end_);
    std::vector<Communicator::FloatRuns> send(static_cast<size_t>(plan_.ranks)), recv(send.size());
    for (int other = 0; other < plan_.ranks; ++other) {
        if (other == rank_) continue;
        const size_t first = std::max(piece.begin, plan_.begin(other)), last = std::min(piece.end, plan_.end(other));
        if (first < last) send[other] = {first, last - first, final_blocks_.size(), total_};
        if (my_first < my_last) {
            const size_t region = first_region_[other];
            const size_t blocks = (other + 1 < plan_.ranks ? first_region_[other + 1] : received_from_.size()) - region;
            recv[other] = {region * shard + (my_first - shard_begin_), my_last - my_first, blocks, shard};
        }
    }
    comm_.all_to_all_runs(slots_.data(), send, received_.data(), recv, Traffic::gradients);
}

void GradientExchange::exchange_compressed_piece(const Piece& piece) {
    const size_t count = piece.end - piece.begin;
    // This rank's blocks into slot 0, folded from the top down as PairwiseSum::fold does.
    for (size_t block = final_blocks_.size() - 1; block > 0; --block) {
        add_into(slot_data(static_cast<int>(block) - 1) + piece.begin, slot_data(static_cast<int>(block)) + piece.begin,
                 count);
    }
    const float* gradient = slot_data(0);
    const size_t my_first = std::max(piece.begin, shard_begin_), my_last = std::min(piece.end, shard_end_);
    std::vector<Communicator::ByteRange> send(static_cast<size_t>(plan_.ranks)), recv(send.size());
    for (int other = 0; other < plan_.ranks; ++other) {
        if (other == rank_) continue;
        const size_t first = std::max(piece.begin, plan_.begin(other)), last = std::min(piece.end, plan_.end(other));
        if (first < last) {
            const size_t bytes = wire_bytes(last - first, compress_bits_);
            encode_with_feedback(gradient + first, residual_at(first), last - first, compress_bits_,
                                 send_wire_.data() + send_used_);
            send[other] = {send_used_, bytes};
            send_used_ += bytes;
        }
        if (my_first < my_last) {
            const size_t bytes = wire_bytes(my_last - my_first, compress_bits_);
            recv[other] = {recv_used_, bytes};
            received_parts_.push_back({other, recv_used_, my_first, my_last - my_first});
            recv_used_ += bytes;
        }
    }
    comm_.all_to_all_bytes(send_wire_.data(), send, recv_wire_.data(), recv, Traffic::gradients);
}

float* GradientExchange::reduce_compressed() {
    const size_t shard = shard_end_ - shard_begin_;
    for (const ReceivedPart& part : received_parts_) {
        float* region = received_.data() + first_region_[static_cast<size_t>(part.from)] * shard;
        decode(recv_wire_.data() + part.wire_offset, part.count, compress_bits_, region + (part.begin - shard_begin_));
    }
    // One part per rank, summed in rank order into the first.
    std::vector<float*> parts;
    for (int from = 0; from < plan_.ranks; ++from) {
        parts.push_back(from == rank_ ? slot_data(0) + shard_begin_
                                      : received_.data() + first_region_[static_cast<size_t>(from)] * shard);
    }
    for (size_t from = 1; from < parts.size(); ++from) add_into(parts[0], parts[from], shard);
    return parts[0];
}

void GradientExchange::drop_residual() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

float* GradientExchange::reduce() {
    const auto wait_start = std::chrono::steady_clock::now();
    comm_.wait_all();
    wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
    for (size_t p = 0; p < pieces_.size(); ++p) {
        // A backward pass that skipped or repeated a piece would silently corrupt the sum.
        if (acquired_[p] != pieces_[p].visits || released_[p] != pieces_[p].visits) {
            throw Error("internal error: gradient piece " + std::to_string(p) + " visited " +
                        std::to_string(released_[p]) + " times in the last leaf, expected " +
                        std::to_string(pieces_[p].visits));
        }
    }
    if (compress_bits_) {
        shard_gradient_ = reduce_compressed();
        return shard_gradient_;
    }
    // Every rank's blocks of this shard in leaf order, then the fixed merges and the fold.
    const size_t shard = shard_end_ - shard_begin_;
    PairwiseSum sum;
    std::vector<float*> stack;
    auto merge_and_drop = [&](int lower, int upper) {
        add_into(stack[lower], stack[upper], shard);
        stack.pop_back();
    };
    for (size_t i = 0; i < shard_blocks_.size(); ++i) {
        stack.push_back(shard_parts_[i]);
        sum.push(shard_blocks_[i], merge_and_drop);
    }
    sum.fold(merge_and_drop);
    shard_gradient_ = stack.empty() ? nullptr : stack[0];
    return shard_gradient_;
}

double GradientExchange::global_norm() {
    const std::vector<double> mine = chunk_sums_of_squares(shard_gradient_, shard_end_ - shard_begin_);
    std::vector<int> counts;
    for (int r = 0; r < plan_.ranks; ++r) {
        counts.push_back(static_cast<int>((plan_.end(r) - plan_.begin(r) + kSquareSumChunk - 1) / kSquareSumChunk));
    }
    return std::sqrt(sum_in_order(comm_.allgather(mine, counts)));
}

void GradientExchange::scale(float factor) {
    float* g = shard_gradient_;
    const size_t count = shard_end_ - shard_begin_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) g[i] *= factor;
}

}  // namespace dqt
