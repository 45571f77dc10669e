// The CUDA backend's kernels against the GPU's own limits, measured in this process: the fused
// DQT update (bytes it must move over the device-to-device copy bandwidth), bf16 and fp32
// GEMMs at the 130M model's shapes (over the bf16 dense rate), both attention paths, and whole
// training steps of the 130M model (forward, backward, optimizer) per method and compute dtype.
// Prints one JSON line per figure. Needs a GPU.
//
//     build-cuda/bench_cuda [tokens=16384] [train]
//     build-cuda/bench_cuda 16384 train dqt-1.58 bf16 [STEPS=4] [recompute]   one method's training
//         steps only (recompute: --recompute's activations, each layer's input saved and the rest
//         recomputed); the timed steps sit between cudaProfilerStart and Stop, for a kernel profile:
//         ncu --profile-from-start off --metrics gpu__time_duration.sum --csv build-cuda/bench_cuda ...
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "cuda/attention_tc.h"
#include "cuda/device.h"
#include "cuda/optimizer_update.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/training_pass.h"
#include "model/initialization.h"

using namespace dqt;
using namespace dqt::cuda;

namespace {

// Median milliseconds of `repeats` runs of fn, after two warm-ups, by CUDA events.
double median_ms(const std::function<void()>& fn, int repeats = 10) {
    fn();
    fn();
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<float> times;
    for (int r = 0; r < repeats; ++r) {
        cudaEventRecord(start);
        fn();
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, start, stop);
        times.push_back(ms);
    }
    synchronize("benchmark");
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

DeviceArray<float> random_device(size_t count, std::mt19937_64& rng, float spread) {
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> host(count);
    for (float& x : host) x = normal(rng);
    return to_device(MemCategory::scratch, host.data(), count);
}

// Steps of the paper's 130M model (dim 768, 12 layers, 12 heads, FFN 2048, vocab 32000, seq
// 1024), `tokens` a step: tokens/s over 4 steps after 2 warm-ups, and the device's peak by category.
// only_method, only_compute: one configuration ("" for all); timed_steps after two warm-up steps.
void train_steps(int tokens, const std::string& only_method, const std::string& only_compute, int timed_steps,
                 bool recompute) {
    ModelConfig config;
    config.dim = 768;
    config.n_layers = 12;
    config.n_heads = 12;
    config.n_kv_heads = 12;
    config.ffn_dim = 2048;
    config.vocab_size = 32000;
    config.seq_len = 1024;
    config.tie_embeddings = false;
    const int T = config.seq_len, B = tokens / T, N = B * T;
    std::mt19937_64 rng(3);
    std::vector<int32_t> batch(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
    for (int i = 0; i < N; ++i) {
        batch[i] = static_cast<int32_t>(rng() % config.vocab_size);
        targets[i] = static_cast<int32_t>(rng() % config.vocab_size);
    }
    for (const char* label : {"fp", "bitnet", "dqt-1.58", "dqt-8"}) {
        for (ComputeDtype compute : {ComputeDtype::bf16, ComputeDtype::fp32}) {
            const std::string name = label;
            if ((!only_method.empty() && name != only_method) ||
                (!only_compute.empty() && only_compute != compute_dtype_name(compute))) {
                continue;
            }
            MethodConfig method;
            if (name == "bitnet") method.kind = Method::bitnet;
            if (name.rfind("dqt", 0) == 0) {
                method.kind = Method::dqt;
                method.grid = parse_code_grid(name == "dqt-8" ? "8" : "1.58");
            }
            method.compute = compute;
            ModelParameters host(config, method);
            initialize_parameters(host, 1);
            const StateDtype state = method.kind == Method::dqt ? StateDtype::q8 : StateDtype::fp32;
            device_reset_peaks();
            const int64_t before = device_peak_total_bytes();
            DeviceModel device(host);
            DeviceOptimizer optimizer(OptimizerState(host.layout, state), host.layout);
            DeviceActivations acts(config, B, T, recompute);
            TrainingPass pass(device);
            DeviceArray<float> gradients(MemCategory::gradients, host.layout.total);
            double loss = 0.0;
            auto step = [&](int64_t t) {
                loss = pass.forward(acts, batch.data(), targets.data()) / N;
                gradients.zero();
                pass.backward(acts, 1.0f / N, gradients.data());
                optimizer.step(device, gradients.data(), AdamWConfig{}, 1e-3f, t, 1);
            };
            step(1);
            step(2);
            synchronize("warm-up steps");
            cudaProfilerStart();
            const auto start = std::chrono::steady_clock::now();
            for (int t = 3; t < 3 + timed_steps; ++t) step(t);
            synchronize("timed steps");
            cudaProfilerStop();
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::printf("{\"figure\": \"train_step\", \"method\": \"%s\", \"compute\": \"%s\", \"state\": \"%s\", "
                        "\"recompute\": %s, \"tokens\": %d, \"tokens_per_s\": %.0f, \"loss\": %.4f, \"peak_mib\": %.0f",
                        label, compute_dtype_name(compute), state_dtype_bits(state), recompute ? "true" : "false", N,
                        timed_steps * static_cast<double>(N) / seconds, loss,
                        (device_peak_total_bytes() - before) / 1048576.0);
            for (int c = 0; c < kMemCategoryCount; ++c) {
                std::printf(", \"%s_mib\": %.0f", mem_category_name(static_cast<MemCategory>(c)),
                            device_peak_bytes(static_cast<MemCategory>(c)) / 1048576.0);
            }
            std::printf(", \"cached_mib\": %.0f, \"driver_used_mib\": %.0f}\n", device_cached_bytes() / 1048576.0,
                        driver_memory().used / 1048576.0);
            std::fflush(stdout);
        }
    }
}

// Device-to-device copy bandwidth over 2 GiB (far beyond the L2), bytes read plus written.
double bench_copy() {
    const size_t copy_bytes = size_t{1} << 31;
    DeviceBuffer from(MemCategory::scratch, copy_bytes), to(MemCategory::scratch, copy_bytes);
    from.zero();
    const double copy_ms = median_ms([&] { cudaMemcpy(to.data(), from.data(), copy_bytes, cudaMemcpyDeviceToDevice); });
    const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;
    std::printf("{\"figure\": \"copy\", \"ms\": %.3f, \"gb_per_s\": %.0f}\n", copy_ms, copy_gbs);
    from.release();
    to.release();
    return copy_gbs;
}

// The fused update of 85M ternary / 8-bit weights (the 130M model's block linears) in one
// tensor: bytes = codes read + written, gradient read (fp32), moments read + written.
void bench_updates(double copy_gbs, std::mt19937_64& rng) {
    const size_t count = size_t{85} * 1000 * 1000 / kStateBlock * kStateBlock;
    DeviceArray<float> g = random_device(count, rng, 1e-3f);
    for (int bits : {1, 8}) {
        for (StateDtype state : {StateDtype::fp32, StateDtype::q8}) {
            const CodeGrid grid{bits};
            DeviceArray<uint8_t> codes(MemCategory::weights, code_bytes(grid, count));
            codes.zero();
            const float initial_scale = 30.0f;
            DeviceArray<float> scale = to_device(MemCategory::weights, &initial_scale, 1);
            DeviceMoments moments(TensorMoments(0, count, state));  // zeroed
            const size_t element = state == StateDtype::q8 ? 1 : 4;
            int64_t t = 1;
            const double ms = median_ms([&] {
                DeviceDqtStep step(DeviceCodedTensor{codes.data(), scale.data(), count, grid, 3}, AdamWConfig{},
                                   1e-3f, t++, DqtRounding{Rounding::stochastic, 9, ScaleRule::reference, 0});
                step.apply(g.data(), moments, 0, count);
                step.finish(moments);
            });
            const double bytes = 2.0 * code_bytes(grid, count) + 4.0 * count + 4.0 * element * count +
                                 (state == StateDtype::q8 ? 16.0 * count / kStateBlock : 0.0);
            std::printf("{\"figure\": \"dqt_update\", \"grid\": \"%s\", \"state\": \"%s\", \"elements\": %zu, "
                        "\"ms\": %.3f, \"gb_per_s\": %.0f, \"of_copy\": %.2f}\n",
                        grid.label().c_str(), state_dtype_bits(state), count, ms, bytes / ms / 1e6,
                        bytes / ms / 1e6 / copy_gbs);
        }
    }
}

// The linear layers' products of the 130M model at `tokens` tokens a step.
void bench_gemms(int tokens, std::mt19937_64& rng) {
    const Gemm gemm;
    struct Shape {
        const char* name;
        int m, n, k;
        bool ta, tb;
    };
    const int C = 768, F = 2048, V = 32000;
    for (const Shape& s : {Shape{"ffn_up forward", tokens, F, C, false, true},
                           Shape{"ffn_up input grad", tokens, C, F, false, false},
                           Shape{"ffn_up weight grad", F, C, tokens, true, false},
                           Shape{"head forward", tokens, V, C, false, true}}) {
        DeviceArray<float> a = random_device(static_cast<size_t>(s.m) * s.k, rng, 1.0f);
        DeviceArray<float> b = random_device(static_cast<size_t>(s.k) * s.n, rng, 1.0f);
        DeviceArray<float> c(MemCategory::scratch, static_cast<size_t>(s.m) * s.n);
        DeviceArray<uint16_t> a16(MemCategory::scratch, a.size()), b16(MemCategory::scratch, b.size());
        round_to_bf16(a16.data(), a.data(), a.size());
        round_to_bf16(b16.data(), b.data(), b.size());
        const double flops = 2.0 * s.m * s.n * s.k;
        const double bf16_ms = median_ms([&] {
            gemm.multiply({a16.data(), true}, s.ta, {b16.data(), true}, s.tb, c.data(), s.m, s.n, s.k, 0.0f);
        });
        const double fp32_ms = median_ms([&] {
            gemm.multiply({a.data(), false}, s.ta, {b.data(), false}, s.tb, c.data(), s.m, s.n, s.k, 0.0f);
        });
        std::printf("{\"figure\": \"gemm\", \"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"bf16_tflops\": %.0f, "
                    "\"fp32_tflops\": %.1f}\n",
                    s.name, s.m, s.n, s.k, flops / bf16_ms / 1e9, flops / fp32_ms / 1e9);
    }
}

// Attention of one layer: B * T = tokens, T = 1024, 12 heads of 64; the fp32 kernels (fp32
// compute) and the tensor-core path (bf16 compute).
void bench_attention(int tokens, std::mt19937_64& rng) {
    const int T = 1024, B = tokens / T, H = 12, D = 64;
    const size_t n = static_cast<size_t>(B) * T * H * D;
    DeviceArray<float> q = random_device(n, rng, 1.0f), k = random_device(n, rng, 1.0f), v = random_device(n, rng, 1.0f);
    DeviceArray<float> out(MemCategory::scratch, n), dout = random_device(n, rng, 1.0f), dq(MemCategory::scratch, n),
        dk(MemCategory::scratch, n), dv(MemCategory::scratch, n), lse(MemCategory::scratch, static_cast<size_t>(B) * H * T),
        delta(MemCategory::scratch, static_cast<size_t>(B) * H * T);
    const Gemm gemm;
    const double causal_flops = 2.0 * B * H * static_cast<double>(T) * T * D;  // QK^T and PV, half of the T x T
    for (const bool tensor_cores : {false, true}) {
        const double forward_ms = median_ms([&] {
            if (tensor_cores) {
                attention_tc_forward(gemm, out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, H, D);
            } else {
                attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, H, D);
            }
        });
        const double backward_ms = median_ms([&] {
            if (tensor_cores) {
                attention_tc_backward(gemm, dq.data(), dk.data(), dv.data(), dout.data(), lse.data(), q.data(), k.data(),
                                      v.data(), B, T, H, H, D);
            } else {
                attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                                   k.data(), v.data(), B, T, H, H, D, delta.data());
            }
        });
        std::printf("{\"figure\": \"attention\", \"path\": \"%s\", \"batch\": %d, \"seq\": %d, \"heads\": %d, "
                    "\"head_dim\": %d, \"forward_ms\": %.3f, \"backward_ms\": %.3f, \"forward_tflops\": %.1f}\n",
                    tensor_cores ? "tensor cores, bf16" : "fp32 kernels", B, T, H, D, forward_ms, backward_ms,
                    causal_flops / forward_ms / 1e9);
    }
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const DeviceInfo info = require_gpu();
        const int tokens = argc > 1 ? std::atoi(argv[1]) : 16384;
        std::printf("{\"device\": \"%s\", \"multiprocessors\": %d, \"l2_mib\": %.0f}\n", info.name.c_str(),
                    info.multiprocessors, info.l2_bytes / 1048576.0);
        if (argc > 3) {  // one configuration's training steps only
            train_steps(tokens, argv[3], argc > 4 ? argv[4] : "", argc > 5 ? std::atoi(argv[5]) : 4,
                        argc > 6 && std::string(argv[6]) == "recompute");
            return 0;
        }
        std::mt19937_64 rng(1);
        const double copy_gbs = bench_copy();
        bench_updates(copy_gbs, rng);
        bench_gemms(tokens, rng);
        bench_attention(tokens, rng);
        if (argc > 2 && std::string(argv[2]) == "train") train_steps(tokens, "", "", 4, false);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dqt: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
