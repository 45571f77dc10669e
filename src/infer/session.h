#pragma once
// The one inference forward: n tokens of one sequence at positions p .. p + n - 1, against the
// keys and values of positions 0 .. p - 1 in a KV cache. It serves the prompt (n > 1, p = 0),
// decode (n = 1) and evaluation (a whole window, p = 0), and saves nothing for a backward.
//
// At p = 0 every op is the training forward's own kernel on the same rows (attention included,
// without its saved probabilities), and quantized linears run the integer kernels on the
// integers the training forward multiplies: a ternary model's logits equal
// model_forward's bit for bit (test). Decode (p > 0) attends through attention_decode, whose
// arithmetic is that of the full forward's row: decoding gives the full forward's logits too.
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "infer/inference_model.h"
#include "kernels/int8_rows.h"

namespace dqt {

// Keys and values of every layer for positions [0, length), fp32 after RoPE, in the layout
// attention_decode reads (kernels/attention.h): per kv head, keys transposed and values as rows.
struct KvCache {
    int max_seq = 0;
    int key_stride = 0;                // attention_key_stride(max_seq)
    int length = 0;                    // positions filled
    std::vector<Array<float>> keys;    // per layer (Hkv, D, key_stride), category activations
    std::vector<Array<float>> values;  // per layer (Hkv, max_seq, D) + the kernel's slack
    KvCache(const ModelConfig& config, int max_seq);
    size_t bytes() const;
};

enum class LogitRows { all, last };

// One sequence: a KV cache and the scratch of its forward passes (category scratch, grown to
// the largest n seen, reused across calls).
class InferenceSession {
public:
    // max_seq: the longest sequence this session holds (at most the model's seq_len).
    InferenceSession(const InferenceModel& model, int max_seq);

    // Runs tokens [0, n) at positions position() .. position() + n - 1 and returns their
    // next-token logits: (n, V) for LogitRows::all, (1, V) of the last token for last. Valid
    // until the next call. dqt::Error (nothing changed) for a token outside the vocabulary or
    // a sequence longer than max_seq.
    const float* run(const int32_t* tokens, int n, LogitRows rows);

    int position() const { return cache_.length; }
    int max_seq() const { return cache_.max_seq; }
    void reset() { cache_.length = 0; }  // start a new sequence
    const KvCache& cache() const { return cache_; }

private:
    struct LinearJob {
        const InferenceLinear* weight;
        float* out;  // (n, weight->rows)
    };
    void reserve(int n);
    // The jobs' products with one shared input x (n, cols): the integer kernels (one parallel
    // region, weight rows of all jobs split over the threads) or gemm for dense weights.
    void run_linears(std::initializer_list<LinearJob> jobs, const float* x, int n);
    void attention(int layer, int n);

    const InferenceModel& model_;
    KvCache cache_;
    int capacity_ = 0;  // tokens the scratch below holds
    Array<float> x_;       // (n, C) residual stream
    Array<float> normed_;  // (n, C), later the logits' input
    Array<float> q_;       // (n, C)
    Array<float> k_;       // (n, Hkv, D) before they go to the cache
    Array<float> v_;       // (n, Hkv, D)
    Array<float> att_;     // (n, C)
    Array<float> att_sub_; // (n, C)
    Array<float> proj_;    // (n, C)
    Array<float> gate_;    // (n, F)
    Array<float> up_;      // (n, F)
    Array<float> h_;       // (n, F)
    Array<float> h_sub_;   // (n, F)
    Array<float> rstd_;    // (n)
    Array<float> logits_;  // (n, V) or (1, V)
    Int8Rows quantized_;   // the shared input of the current quantized linears
};

}  // namespace dqt
