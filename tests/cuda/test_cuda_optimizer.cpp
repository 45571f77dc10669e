// The GPU's optimizer against the CPU's: from identical inputs, one step must leave identical
// results, bit for bit: the DQT update (optim/dqt_update.h: codes, moments, scale) for every
// code grid, moment storage, rounding, scale rule and with sub-grid residuals, and AdamW
// (optim/adamw.h: weights, moments) for every moment storage.
#include <cstring>
#include <tuple>

#include "cuda/optimizer_update.h"
#include "cuda_test_support.h"

using namespace dqt;
using namespace dqt::cuda;
using namespace dqt::cuda::testing;

namespace {

struct Case {
    int bits;  // 1: ternary
    StateDtype state;
    Rounding rounding;
    ScaleRule rule;
    int residual_bits;
};

std::string case_name(const Case& c) {
    return "grid " + CodeGrid{c.bits}.label() + ", state " + state_dtype_bits(c.state) + ", " +
           rounding_name(c.rounding) + ", " + scale_rule_name(c.rule) + " scale, residual bits " +
           std::to_string(c.residual_bits);
}

std::vector<uint8_t> bytes_of(const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    return std::vector<uint8_t>(p, p + bytes);
}

void expect_same_step(const Case& c, uint64_t seed) {
    SCOPED_TRACE(case_name(c) + ", seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const size_t count = 3 * kStateBlock * 4 + 130;  // a partial state block and packed byte at the end
    const CodeGrid grid{c.bits};
    const AdamWConfig config{0.9f, 0.95f, 1e-8f, 0.1f};
    const DqtRounding rounding{c.rounding, seed, c.rule, c.residual_bits};

    // Start from a CPU tensor one step into training, so the moments are not zero.
    std::vector<uint8_t> codes(code_bytes(grid, count));
    std::uniform_int_distribution<int> code(grid.qn(), grid.qp());
    for (size_t i = 0; i < count; ++i) write_code(codes.data(), grid, i, code(rng));
    float scale = 40.0f;
    TensorMoments cpu_moments(0, count, c.state, c.residual_bits > 0);
    const CodedTensor cpu{codes.data(), &scale, count, grid, 7};
    {
        const std::vector<float> g0 = random_floats(rng, count, 1e-3f);
        const DqtStep warmup(cpu, config, 1e-3f, 1, rounding);
        warmup.apply(g0.data(), cpu_moments, 0, count);
        warmup.finish(cpu_moments, 0.25);
    }

    DeviceArray<uint8_t> device_codes = upload(codes, MemCategory::weights);
    DeviceArray<float> device_scale = to_device(MemCategory::weights, &scale, 1);
    DeviceMoments device_moments(cpu_moments);
    const std::vector<float> g = random_floats(rng, count, 1e-3f);
    DeviceArray<float> device_g = upload(g, MemCategory::gradients);

    // Step 2 on both sides, in two ranges (a fused update's pieces), large enough (about a grid
    // step) to move codes under either rounding.
    const std::vector<uint8_t> before = codes;
    const size_t cut = 2 * kStateBlock * 4;
    ExactSum dot = 0;
    const DqtStep cpu_step(cpu, config, 2e-2f, 2, rounding);
    cpu_step.apply(g.data(), cpu_moments, 0, cut, &dot);
    cpu_step.apply(g.data() + cut, cpu_moments, cut, count, &dot);
    cpu_step.finish(cpu_moments, exact_sum_value(dot));

    DeviceDqtStep gpu_step(DeviceCodedTensor{device_codes.data(), device_scale.data(), count, grid, 7}, config, 2e-2f,
                           2, rounding);
    gpu_step.apply(device_g.data(), device_moments, 0, cut);
    gpu_step.apply(device_g.data() + cut, device_moments, cut, count);
    gpu_step.finish(device_moments);

    TensorMoments gpu_moments(0, count, c.state, c.residual_bits > 0);
    device_moments.copy_to(gpu_moments);
    float gpu_scale = 0.0f;
    copy_to_host(&gpu_scale, device_scale.data(), sizeof gpu_scale);
    const std::vector<uint8_t> gpu_codes = download(device_codes);

    size_t bytes_changed = 0;  // the step must move codes, or equality shows little
    for (size_t i = 0; i < before.size(); ++i) bytes_changed += codes[i] != before[i];
    EXPECT_GT(bytes_changed, before.size() / 10);
    EXPECT_EQ(gpu_codes, codes);
    EXPECT_EQ(std::memcmp(&gpu_scale, &scale, sizeof scale), 0) << gpu_scale << " vs " << scale;
    const size_t moment_bytes = count * cpu_moments.element_bytes();
    EXPECT_EQ(bytes_of(gpu_moments.m.data(), moment_bytes), bytes_of(cpu_moments.m.data(), moment_bytes));
    EXPECT_EQ(bytes_of(gpu_moments.v.data(), moment_bytes), bytes_of(cpu_moments.v.data(), moment_bytes));
    if (c.state == StateDtype::q8) {
        EXPECT_EQ(bytes_of(gpu_moments.m_absmax.data(), gpu_moments.m_absmax.bytes()),
                  bytes_of(cpu_moments.m_absmax.data(), cpu_moments.m_absmax.bytes()));
        EXPECT_EQ(bytes_of(gpu_moments.v_absmax.data(), gpu_moments.v_absmax.bytes()),
                  bytes_of(cpu_moments.v_absmax.data(), cpu_moments.v_absmax.bytes()));
    }
    if (c.residual_bits > 0) {
        EXPECT_EQ(bytes_of(gpu_moments.residual.data(), count), bytes_of(cpu_moments.residual.data(), count));
    }
    EXPECT_EQ(gpu_moments.scale_moments[0], cpu_moments.scale_moments[0]);
    EXPECT_EQ(gpu_moments.scale_moments[1], cpu_moments.scale_moments[1]);
}

}  // namespace

class GpuOptimizer : public Gpu {};

TEST_F(GpuOptimizer, DqtUpdateWritesTheCpuCodesMomentsAndScaleBitForBit) {
    const uint64_t seed = test_seed();
    for (int bits : {1, 4, 8}) {
        for (StateDtype state : {StateDtype::fp32, StateDtype::bf16, StateDtype::q8}) {
            for (Rounding rounding : {Rounding::stochastic, Rounding::nearest}) {
                for (ScaleRule rule : {ScaleRule::reference, ScaleRule::learned}) {
                    expect_same_step(Case{bits, state, rounding, rule, 0}, seed);
                }
            }
        }
    }
    expect_same_step(Case{1, StateDtype::q8, Rounding::stochastic, ScaleRule::reference, 3}, seed);
    expect_same_step(Case{8, StateDtype::fp32, Rounding::stochastic, ScaleRule::learned, 3}, seed);
}

TEST_F(GpuOptimizer, AdamWWritesTheCpuWeightsAndMomentsBitForBit) {
    const uint64_t seed = test_seed();
    for (StateDtype state : {StateDtype::fp32, StateDtype::bf16, StateDtype::q8}) {
        for (bool decay : {true, false}) {
            SCOPED_TRACE(std::string("state ") + state_dtype_bits(state) + (decay ? ", decay" : ", no decay"));
            std::mt19937_64 rng(seed);
            const size_t count = 5 * kStateBlock + 77;
            const AdamWConfig config{0.9f, 0.95f, 1e-8f, 0.1f};
            std::vector<float> w = random_floats(rng, count, 0.02f);
            TensorMoments cpu_moments(0, count, state);
            const std::vector<float> g0 = random_floats(rng, count, 1e-2f);
            AdamWStep(config, 1e-3f, 1, decay).apply(w.data(), g0.data(), cpu_moments, 0, count);

            DeviceArray<float> device_w = upload(w, MemCategory::weights);
            DeviceMoments device_moments(cpu_moments);
            const std::vector<float> g = random_floats(rng, count, 1e-2f);
            DeviceArray<float> device_g = upload(g, MemCategory::gradients);
            const std::vector<float> before = w;
            const AdamWStep cpu_step(config, 3e-3f, 2, decay);
            cpu_step.apply(w.data(), g.data(), cpu_moments, 0, 2 * kStateBlock);
            cpu_step.apply(w.data(), g.data() + 2 * kStateBlock, cpu_moments, 2 * kStateBlock, count);
            const DeviceAdamWStep gpu_step(config, 3e-3f, 2, decay);
            gpu_step.apply(device_w.data(), device_g.data(), device_moments, 0, 2 * kStateBlock);
            gpu_step.apply(device_w.data(), device_g.data() + 2 * kStateBlock, device_moments, 2 * kStateBlock, count);

            TensorMoments gpu_moments(0, count, state);
            device_moments.copy_to(gpu_moments);
            const std::vector<float> gpu_w = download(device_w);
            EXPECT_NE(w, before);
            EXPECT_EQ(bytes_of(gpu_w.data(), count * 4), bytes_of(w.data(), count * 4));
            const size_t moment_bytes = count * cpu_moments.element_bytes();
            EXPECT_EQ(bytes_of(gpu_moments.m.data(), moment_bytes), bytes_of(cpu_moments.m.data(), moment_bytes));
            EXPECT_EQ(bytes_of(gpu_moments.v.data(), moment_bytes), bytes_of(cpu_moments.v.data(), moment_bytes));
        }
    }
}
