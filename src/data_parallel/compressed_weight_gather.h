#pragma once
// --compress-weights: the all-gather of new fp32 weights as block-quantized differences
// (SDP4Bit's weight-difference quantization). Every rank holds the same copy of the fp32
// values (ModelParameters::values, what forward and backward read); the owner of a shard also
// keeps its exact values (the "master" shard, what the optimizer updates). After the update
// the owner encodes master - copy (data_parallel/wire_quantizer.h), every rank adds the decoded
// difference to its copy of that shard, and master - copy is what is still to send: the
// residual, carried into the next step's difference by construction.
//
// One step: begin_update() puts the master shard where the optimizer updates it, the optimizer
// runs, finish_update() sends the differences and puts the copy back. More than one rank only:
// one rank has nothing to send.
#include <cstdint>

#include "core/memory.h"
#include "data_parallel/comm.h"
#include "data_parallel/shard_plan.h"
#include "model/parameters.h"

namespace dqt {

class CompressedWeightGather {
public:
    // bits: 8 or 4. The master shard starts equal to the copy.
    CompressedWeightGather(ModelParameters& model, const ShardPlan& plan, Communicator& comm, int bits);

    void begin_update();
    void finish_update();

    // This rank's exact values of its shard of ModelParameters::values (between steps).
    Array<float>& master() { return master_; }

private:
    ModelParameters& model_;
    const ShardPlan& plan_;
    Communicator& comm_;
    int bits_;
    Array<float> master_;            // (value_cut[rank + 1] - value_cut[rank]) floats
    std::vector<size_t> wire_cut_;   // (ranks + 1) each rank's encoded shard in wire_, bytes
    Array<uint8_t> wire_;
};

}  // namespace dqt
