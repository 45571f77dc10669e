#pragma once
// The gradient transport of a data-parallel step (ZeRO-1). Each rank accumulates the gradient
// of its leaves (micro-batches [rank * k, (rank + 1) * k) of the step's M = N * k) in a
// GradientAccumulator (model/gradient_accumulator.h), which tells this exchange of each piece
// as soon as it is final on this rank:
//  - the piece's parts that other ranks own go out at once (one nonblocking MPI_Ialltoallw per
//    gradient piece: the bucket), overlapping the rest of the backward pass;
//  - reduce() waits, then sums this rank's shard over every rank's blocks in the fixed order:
//    a reduce-scatter whose result has the same bits as one process's accumulated gradient.
// A single-process step uses the accumulator alone and never builds an exchange.
//
// With compression (--compress-gradients 8 or 4) the last leaf's piece is first folded into
// slot 0 on this rank; each other rank's part of it goes out block-quantized
// (data_parallel/wire_quantizer.h) with error feedback: what the wire does not carry stays in
// this rank's residual and is added to the next step's part. The owner decodes one part per
// rank and sums them in rank order: the same bits run to run for a fixed rank count (not across
// rank counts: each rank's rounding depends on what it holds).
#include <cstdint>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "data_parallel/comm.h"
#include "core/pairwise_sum.h"
#include "data_parallel/shard_plan.h"
#include "model/gradient_accumulator.h"
#include "model/parameters.h"

namespace dqt {

class GradientExchange {
public:
    // Listens to `accumulator` (this rank's leaves_per_rank leaves) for final pieces, on more
    // than one rank. compress_bits: 0 (fp32), 8 or 4.
    GradientExchange(const ModelParameters& model, GradientAccumulator& accumulator, const ShardPlan& plan,
                     Communicator& comm, int leaves_per_rank, int compress_bits = 0);

    // Before the step's first leaf.
    void begin_step();
    // After the last leaf: the step's summed gradient of this rank's shard, flat positions
    // [plan.begin(rank), plan.end(rank)).
    float* reduce();
    // L2 norm of the whole step's gradient (every shard), the same bits for any rank count.
    double global_norm();
    // Seconds the last reduce() waited for transfers: what the backward pass did not hide.
    double last_wait_seconds() const { return wait_seconds_; }

    // Error feedback (compressed only, else empty): what this rank has not yet sent of the
    // gradient positions outside its shard, in flat order (a resumed run restores it).
    Array<float>& residual() { return residual_; }
    // Forgets the residual (after a skipped step, whose gradient may not be finite).
    void drop_residual();

private:
    void exchange_final_piece(size_t begin, size_t end);
    void exchange_compressed_piece(size_t begin, size_t end);
    float* reduce_compressed();
    // Where flat position `position` (outside this rank's shard) lives in residual_.
    float* residual_at(size_t position) const {
        return residual_.data() + (position < shard_begin_ ? position : position - (shard_end_ - shard_begin_));
    }

    GradientAccumulator& accumulator_;
    const ShardPlan& plan_;
    Communicator& comm_;
    int rank_;
    size_t shard_begin_, shard_end_;
    size_t total_ = 0;  // layout.total
    // Other ranks' blocks of this rank's shard: one (shard size) region per (rank, block), in
    // rank and block order; received_from_ names each region's rank, first_region_ (ranks)
    // each rank's first region.
    Array<float> received_;
    std::vector<int> received_from_;
    std::vector<size_t> first_region_;
    // Every rank's blocks in leaf order, and where this rank's shard of each lives.
    std::vector<LeafBlock> shard_blocks_;
    std::vector<float*> shard_parts_;
    float* shard_gradient_ = nullptr;
    double wait_seconds_ = 0.0;

    // Compressed exchange: one (shard size) region per other rank in received_ (rank order),
    // the step's encoded parts in the order they were posted, and where each received part goes.
    struct ReceivedPart {
        int from;
        size_t wire_offset, begin, count;  // bytes into recv_wire_; flat positions
    };
    int compress_bits_ = 0;
    Array<float> residual_;  // (layout.total - shard) flat positions outside this rank's shard
    Array<uint8_t> send_wire_, recv_wire_;
    size_t send_used_ = 0, recv_used_ = 0;
    std::vector<ReceivedPart> received_parts_;
};

}  // namespace dqt
