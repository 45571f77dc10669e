#pragma once
// Everything that defines a training run. Stored in every checkpoint so that `--resume`
// continues the same run.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "data/special_tokens.h"
#include "data_parallel/compression.h"
#include "model/config.h"
#include "model/method.h"
#include "optim/adamw.h"
#include "optim/optimizer_state.h"

namespace dqt {

// Where the training step runs: the CPU, or a CUDA GPU (a build with cmake -DDQT_CUDA=ON;
// docs/cuda.md). Evaluation and checkpoints run on the CPU either way.
enum class TrainDevice { cpu, cuda };
TrainDevice parse_train_device(const std::string& name);  // "cpu" or "cuda"
const char* train_device_name(TrainDevice device);

struct TrainOptions {
    std::string data_dir = "data/sotu-byte";  // prepared by `dqt data`
    std::string out_dir = "runs/default";     // checkpoint.dqt, metrics.jsonl, config.json
    ModelConfig model;
    MethodConfig method;       // fp, bitnet or dqt, and how they quantize
    int steps = 600;
    int batch = 8;            // sequences per micro-batch
    int grad_accum = 1;       // micro-batches per optimizer step
    float lr = 2e-3f;         // peak learning rate
    float min_lr_ratio = 0.1f;
    int warmup_steps = 30;
    AdamWConfig adam;
    StateDtype optim_state = StateDtype::fp32;  // Adam moments in fp32, bf16 or block-wise 8-bit
    float grad_clip = 1.0f;   // global-norm clipping; 0 disables
    bool fused_update = false;  // update each weight in the backward pass, no whole-model gradient
    TrainDevice device = TrainDevice::cpu;
    bool recompute = false;   // GPU: save each layer's input only, recompute the rest (and the logits) in the backward
    CommCompression compression;  // of data-parallel transfers (mpirun); off by default
    int eval_every = 100;     // steps; 0 = only at the end
    int64_t eval_tokens = 131072;
    int log_every = 10;
    int checkpoint_every = 200;  // steps; 0 = only at the end
    uint64_t seed = 1234;
    std::string init_from;    // the model file the weights started from (--init-from); empty: the seed
    SpecialTokens special_tokens;  // the --init-from model's (an imported model's BOS and EOS); none otherwise

    // Throws dqt::Error naming the first impossible setting.
    void validate() const;
    int64_t tokens_per_step() const { return static_cast<int64_t>(batch) * grad_accum * model.seq_len; }
};

void to_json(nlohmann::json& j, const TrainOptions& options);
void from_json(const nlohmann::json& j, TrainOptions& options);

}  // namespace dqt
