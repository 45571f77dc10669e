#include "model/decoder_block.h"

namespace dqt {

bool on_residual_stream(BlockValue value) {
    return value == BlockValue::input || value == BlockValue::mid || value == BlockValue::output;
}

int block_value_cols(BlockValue value, const ModelConfig& config) {
    return value == BlockValue::h || value == BlockValue::h_sub ? config.ffn_dim : config.dim;
}

std::vector<BlockStep> decoder_block_steps(const ModelConfig& config) {
    using V = BlockValue;
    using W = BlockWeight;
    const auto norm = [](V in, W gain, V out) { return BlockStep{BlockOp::rmsnorm, in, out, {gain, gain, gain}}; };
    const auto residual_linear = [](V residual, V in, W weight, V out) {
        return BlockStep{BlockOp::residual_linear, in, out, {weight, weight, weight}, residual};
    };
    std::vector<BlockStep> steps;
    // Attention: mid = input + Wo · SubLN(Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n)), n = RMSNorm(input).
    steps.push_back(norm(V::input, W::attn_norm, V::ln1));
    steps.push_back({BlockOp::attention, V::ln1, V::att, {W::wq, W::wk, W::wv}});
    if (config.subln) steps.push_back(norm(V::att, W::attn_subnorm, V::att_sub));
    steps.push_back(residual_linear(V::input, config.subln ? V::att_sub : V::att, W::wo, V::mid));
    // Feed-forward: output = mid + Wdown · SubLN(act(Wgate·n) * (Wup·n)), n = RMSNorm(mid).
    steps.push_back(norm(V::mid, W::ffn_norm, V::ln2));
    steps.push_back({BlockOp::gated_linears, V::ln2, V::h, {W::w_gate, W::w_up, W::w_up}});
    if (config.subln) steps.push_back(norm(V::h, W::ffn_subnorm, V::h_sub));
    steps.push_back(residual_linear(V::mid, config.subln ? V::h_sub : V::h, W::w_down, V::output));
    return steps;
}

}  // namespace dqt
