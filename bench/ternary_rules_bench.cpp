// Ternary inference of a higher-bit model (the paper's claim 4): which rule turns an n-bit
// dqt model's weights into ternary ones best? Scores each rule's converted model on the
// validation split, and prints how the n-bit weights are spread (the reference scale rule
// keeps 8-bit DQT weights inside +-mean|W0|, so many sit at the ends of the grid).
//   build/bench_ternary_rules runs/paper/dqt-8/checkpoint.dqt [EVAL_TOKENS]
// Rules, each per tensor with q in {-1, 0, 1} and W ~ q * alpha:
//   absmean, twn   the library's (model/ternary_convert.h);
//   mse            here only: the threshold (searched over 0.05 .. 1.5 mean|W|) and alpha = the
//                  mean |W| above it that minimise || W - alpha q ||^2.
// Results: docs/results.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "infer/evaluate.h"
#include "model/ternary_convert.h"
#include "quant/codes.h"
#include "quant/ternary.h"
#include "train/model_checkpoint.h"

using namespace dqt;

namespace {

struct Ternary {
    std::vector<int> q;
    double alpha = 0;
};

Ternary threshold_rule(const std::vector<float>& w, double threshold) {
    Ternary t;
    t.q.resize(w.size());
    double sum = 0;
    size_t kept = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        const double a = std::fabs(w[i]);
        t.q[i] = a > threshold ? (w[i] > 0 ? 1 : -1) : 0;
        if (t.q[i] != 0) {
            sum += a;
            ++kept;
        }
    }
    t.alpha = kept ? sum / kept : 1e-8;
    return t;
}

double squared_error(const std::vector<float>& w, const Ternary& t) {
    double e = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        const double d = w[i] - t.alpha * t.q[i];
        e += d * d;
    }
    return e;
}

// The mse rule: the best threshold on a grid of multiples of mean|W|.
Ternary mse_ternarize(const std::vector<float>& w) {
    const double mean = mean_abs(w.data(), w.size());
    Ternary best;
    double best_error = INFINITY;
    for (double f = 0.05; f <= 1.5; f += 0.05) {
        Ternary t = threshold_rule(w, f * mean);
        const double e = squared_error(w, t);
        if (e < best_error) {
            best_error = e;
            best = std::move(t);
        }
    }
    return best;
}

// The library's conversion with the mse rule's codes and scales put in place of absmean's.
std::unique_ptr<ModelParameters> mse_convert(const ModelParameters& model) {
    auto converted = convert_to_ternary(model);
    for (const ParamTensor& t : converted->layout.tensors) {
        if (!t.stores_codes()) continue;
        std::vector<float> w(t.count());
        model.read_dense(model.layout.tensors[static_cast<size_t>(t.tensor_id)], w.data());
        const Ternary tern = mse_ternarize(w);
        for (size_t i = 0; i < w.size(); ++i) write_code(converted->code(t), converted->method.grid, i, tern.q[i]);
        converted->scale(t) = static_cast<float>(1.0 / tern.alpha);
    }
    return converted;
}

// || W - W_ternary || / || W || over every converted tensor.
double relative_weight_error(const ModelParameters& model, const ModelParameters& converted) {
    double error = 0, norm = 0;
    for (const ParamTensor& t : converted.layout.tensors) {
        if (!t.stores_codes()) continue;
        std::vector<float> w(t.count()), wt(t.count());
        model.read_dense(model.layout.tensors[static_cast<size_t>(t.tensor_id)], w.data());
        converted.read_dense(t, wt.data());
        for (size_t i = 0; i < w.size(); ++i) {
            error += (static_cast<double>(w[i]) - wt[i]) * (static_cast<double>(w[i]) - wt[i]);
            norm += static_cast<double>(w[i]) * w[i];
        }
    }
    return std::sqrt(error / norm);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_ternary_rules CHECKPOINT [EVAL_TOKENS]\n");
        return 2;
    }
    try {
        const int64_t eval_tokens = argc > 2 ? std::stoll(argv[2]) : 262144;
        const LoadedModel loaded = load_model_checkpoint(argv[1]);
        const ModelParameters& model = *loaded.model;
        require(model.method.kind == Method::dqt && !model.method.grid.ternary(), "needs an n-bit dqt checkpoint");
        const Dataset data = open_dataset(loaded.options.data_dir);
        const int window = model.config.seq_len;

        // How the n-bit codes are spread: share at the grid's ends and at zero.
        size_t at_ends = 0, at_zero = 0, total = 0;
        for (const ParamTensor& t : model.layout.tensors) {
            if (!t.stores_codes()) continue;
            for (size_t i = 0; i < t.count(); ++i) {
                const int q = read_code(model.code(t), model.method.grid, i);
                at_ends += q == model.method.grid.qn() || q == model.method.grid.qp();
                at_zero += q == 0;
            }
            total += t.count();
        }
        std::printf("%s: %.1f%% of the %s-bit codes at the ends of the grid, %.1f%% at zero\n", argv[1],
                    100.0 * at_ends / total, model.method.grid.label().c_str(), 100.0 * at_zero / total);

        const EvalResult own = evaluate(InferenceModel(model), data.val, window, eval_tokens);
        std::printf("%-8s val loss %.4f nats/token (%lld tokens)\n", "n-bit", own.loss, static_cast<long long>(own.tokens));
        for (const std::string rule : {"absmean", "twn", "mse"}) {
            const auto converted = rule == "mse" ? mse_convert(model) : convert_to_ternary(model, parse_ternary_rule(rule));
            const EvalResult result = evaluate(InferenceModel(*converted), data.val, window, eval_tokens);
            std::printf("%-8s val loss %.4f nats/token (%+.1f%%), weight error ||W - Wt|| / ||W|| = %.3f\n", rule.c_str(),
                        result.loss, 100.0 * (result.loss / own.loss - 1.0), relative_weight_error(model, *converted));
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_ternary_rules: %s\n", e.what());
        return 1;
    }
    return 0;
}
