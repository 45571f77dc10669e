#include "data_parallel/gradient_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "data_parallel/wire_quantizer.h"

namespace dqt {

GradientExchange::GradientExchange(const ModelParameters& model, GradientAccumulator& accumulator,
                                   const ShardPlan& plan, Communicator& comm, int leaves_per_rank, int compress_bits)
    : accumulator_(accumulator),
      plan_(plan),
      comm_(comm),
      rank_(comm.rank()),
      shard_begin_(plan.begin(rank_)),
      shard_end_(plan.end(rank_)),
      total_(model.layout.total),
      compress_bits_(compress_bits) {
    require(plan.ranks > 1, "internal error: a gradient exchange for one rank (one process needs none)");
    require(compress_bits == 0 || compress_bits == 8 || compress_bits == 4,
            "internal error: gradients compress to 8 or 4 bits, not " + std::to_string(compress_bits));
    accumulator.on_final_piece = [this](size_t begin, size_t end) {
        if (compress_bits_) {
            exchange_compressed_piece(begin, end);
        } else {
            exchange_final_piece(begin, end);
        }
        comm_.progress();
    };
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
        for (const GradientPiece& piece : accumulator.pieces()) {
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
            shard_parts_.push_back(from == rank_ ? accumulator.slot(static_cast<int>(block)) + shard_begin_
                                                 : received_.data() + (first_region_[from] + block) * shard);
        }
    }
}

void GradientExchange::begin_step() {
    send_used_ = recv_used_ = 0;
    received_parts_.clear();
}

void GradientExchange::exchange_final_piece(size_t begin, size_t end) {
    // To each rank, its part of the piece from every block this rank holds (one slot apart);
    // from each rank, its blocks of this rank's part (one shard-sized region apart).
    const size_t shard = shard_end_ - shard_begin_;
    const size_t my_first = std::max(begin, shard_begin_), my_last = std::min(end, shard_end_);
    std::vector<Communicator::FloatRuns> send(static_cast<size_t>(plan_.ranks)), recv(send.size());
    for (int other = 0; other < plan_.ranks; ++other) {
        if (other == rank_) continue;
        const size_t first = std::max(begin, plan_.begin(other)), last = std::min(end, plan_.end(other));
        if (first < last) send[other] = {first, last - first, accumulator_.final_blocks().size(), total_};
        if (my_first < my_last) {
            const size_t region = first_region_[other];
            const size_t blocks = (other + 1 < plan_.ranks ? first_region_[other + 1] : received_from_.size()) - region;
            recv[other] = {region * shard + (my_first - shard_begin_), my_last - my_first, blocks, shard};
        }
    }
    comm_.all_to_all_runs(accumulator_.slot(0), send, received_.data(), recv, Traffic::gradients);
}

void GradientExchange::exchange_compressed_piece(size_t begin, size_t end) {
    accumulator_.fold(begin, end);  // this rank's blocks into slot 0
    const float* gradient = accumulator_.slot(0);
    const size_t my_first = std::max(begin, shard_begin_), my_last = std::min(end, shard_end_);
    std::vector<Communicator::ByteRange> send(static_cast<size_t>(plan_.ranks)), recv(send.size());
    for (int other = 0; other < plan_.ranks; ++other) {
        if (other == rank_) continue;
        const size_t first = std::max(begin, plan_.begin(other)), last = std::min(end, plan_.end(other));
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
        parts.push_back(from == rank_ ? accumulator_.slot(0) + shard_begin_
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
    accumulator_.check_complete();
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


}  // namespace dqt
