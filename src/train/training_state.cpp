#include "train/training_state.h"

#include <vector>

#include "data_parallel/sharded_state.h"
#include "model/initialization.h"
#include "model/weight_transfer.h"
#include "optim/dqt_update.h"

namespace dqt {

TrainingState::TrainingState(const TrainOptions& options, const Tokenizer& tokenizer,
                             const std::string& checkpoint_path, bool resume, const ModelParameters* initial,
                             bool async_checkpoint, Communicator& comm)
    : model(options.model, options.method),
      plan(make_shard_plan(model.layout, comm.size())),
      optimizer(model.layout, options.optim_state, plan.owned_by(model.layout, comm.rank())),
      options_(options),
      tokenizer_(tokenizer),
      checkpoint_path_(checkpoint_path),
      async_checkpoint_(async_checkpoint),
      comm_(comm) {
    if (resume) {
        position = load_training_state(checkpoint_path, model, optimizer);
    } else {
        if (initial) {
            transfer_weights(*initial, model);
        } else {
            initialize_parameters(model, options.seed);
        }
        start_all_residuals(initial);
    }
    const StepGroup group{comm, plan, options.compression};
    step.emplace(model, optimizer, options.adam, options.grad_clip, options.fused_update, options.seed,
                 options.grad_accum, &group);
    if (resume &&
        !load_communication_state(checkpoint_path, plan, comm.rank(), step->gradient_residual(), step->weight_master())) {
        residual_note = "the checkpoint holds no gradient residuals of " + std::to_string(comm.size()) +
                        " ranks (it was saved by another rank count): error feedback starts from zero";
    }
    step->previous_grad_norm = position.previous_grad_norm;
    if (async_checkpoint && comm.is_root()) {
        // With N ranks rank 0 writes the gathered whole state, N times its shard: the first
        // checkpoint then allocates the rest of the copy.
        reserve_training_checkpoint(background_writer_, options, model, optimizer, tokenizer);
    }
}

void TrainingState::start_all_residuals(const ModelParameters* initial) {
    for (const ParamTensor& tensor : model.layout.tensors) {
        TensorMoments& moments = optimizer.of(tensor);
        if (tensor.residual_bits == 0) continue;
        // The real values of this rank's share that the codes were made from (scratch).
        Array<float> real(MemCategory::scratch, moments.count);
        if (initial) {
            const ParamTensor& source = initial->layout.tensors[static_cast<size_t>(tensor.tensor_id)];
            source.traits().read_stored(initial->stored(source), source, moments.first, moments.count, real.data());
        } else {
            for (size_t i = 0; i < moments.count; ++i) {
                real[i] = initial_draw(model.config, options_.seed, tensor, moments.first + i);
            }
        }
        start_residuals(real.data(), moments.count, model.scale(tensor), model.method.grid, tensor.residual_bits,
                        model.method.residual_overhang, model.code(tensor), moments.first, moments.residual.data());
    }
}

void TrainingState::save(int done) {
    const int ranks = comm_.size();
    const TrainingPosition here{done, step->previous_grad_norm};
    std::optional<OptimizerState> whole;
    if (ranks > 1) {
        // The whole optimizer state, so that any number of ranks can resume.
        whole = gather_optimizer_state(model.layout, plan, comm_, optimizer);
    }
    // Rank 0: what compressed transfers carry, gathered (scratch while the checkpoint is written).
    CommunicationState communication;
    Array<float> residuals, master;
    if (const Array<float>* mine = step->gradient_residual()) {
        std::vector<size_t> cut = {0};  // every rank's residual, in rank order
        for (int r = 0; r < ranks; ++r) cut.push_back(cut.back() + plan.outside(r));
        residuals = gather_float_shards(comm_, *mine, cut);
        communication = {ranks, residuals.data(), cut.back(), nullptr};
    }
    if (const Array<float>* mine = step->weight_master()) {
        master = gather_float_shards(comm_, *mine, plan.value_cut);
        communication.weight_master = master.data();
    }
    if (!comm_.is_root()) return;
    const OptimizerState& state = whole ? *whole : optimizer;
    if (async_checkpoint_) {
        start_training_checkpoint(background_writer_, checkpoint_path_, options_, here, model, state, tokenizer_,
                                  communication);
    } else {
        save_training_checkpoint(checkpoint_path_, options_, here, model, state, tokenizer_, communication);
    }
}

}  // namespace dqt
