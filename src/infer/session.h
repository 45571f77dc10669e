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
#include <string>
#include <vector>

#include "core/memory.h"
#include "infer/inference_model.h"
#include "kernels/int8_rows.h"
#include "kernels/rope.h"

namespace dqt {

// What the KV cache stores: fp32 (the training forward's values: decode gives the full
// forward's bits), or fp16 (half the bytes each decode step reads; the prompt then attends over
// the fp16-rounded keys and values too, so prompt and decode stay one function).
enum class KvCacheType { f32, f16 };
const char* kv_cache_type_name(KvCacheType type);
// "f32" or "f16"; dqt::Error naming both otherwise.
KvCacheType parse_kv_cache_type(const std::string& name);

// Keys and values of every layer for positions [0, length) after RoPE, in the layout
// attention_decode reads (kernels/attention.h): per kv head, keys transposed and values as rows.
struct KvCache {
    KvCacheType type = KvCacheType::f32;
    int max_seq = 0;
    int key_stride = 0;  // attention_key_stride(max_seq)
    int length = 0;      // positions filled
    // Per layer, of the cache's type (the other pair stays empty), category activations:
    std::vector<Array<float>> keys, values;         // (Hkv, D, key_stride), (Hkv, max_seq, D) + slack
    std::vector<Array<_Float16>> keys_f16, values_f16;
    KvCache(const ModelConfig& config, int max_seq, KvCacheType type);
    size_t bytes() const;
};

enum class LogitRows { all, last };

// One sequence: a KV cache and the scratch of its forward passes (category scratch, grown to
// the largest n seen, reused across calls).
class InferenceSession {
public:
    // max_seq: the longest sequence this session holds (at most the model's seq_len).
    InferenceSession(const InferenceModel& model, int max_seq, KvCacheType cache_type = KvCacheType::f32);

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
    // The n new keys and values (k_, v_) into the cache at position(); with an fp16 cache k_
    // and v_ are rounded to what it holds.
    void store_keys_and_values(int layer, int n);
    void attention(int layer, int n);

    const InferenceModel& model_;
    KvCache cache_;
    RopeTable rope_;    // rotations of positions [0, max_seq), computed once
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
