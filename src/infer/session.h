#pragma once
// The one inference forward: n tokens of one sequence at positions p .. p + n - 1, against the
// keys and values of positions 0 .. p - 1 in a KV cache. It serves the prompt (n > 1, p = 0),
// decode (n = 1) and evaluation (a whole window, p = 0), and saves nothing for a backward.
//
// At p = 0 every op but attention is the training forward's own kernel on the same rows, and
// quantized linears run the integer kernels on the integers the training forward multiplies.
// Attention reads every row's keys and values back from the cache (attention_decode for one
// row, attention_decode_rows for several of one sequence), with the arithmetic of the full
// forward's row: a ternary model's logits equal model_forward's bit for bit (test), and
// decoding gives the full forward's logits too, bit for bit where every product is an integer
// one (a ternary model with a quantized head); with a float head they agree to float rounding
// (test: Inference.DecodingMatchesTheFullForwardAtEveryPosition).
//
// Threads: one team runs all blocks, each block the steps of model/decoder_block.h. Each thread
// owns a share of the kv heads (their q, k, v rows, RoPE, cache writes and attention) and a
// share of every other product's weight rows, so the threads meet four times per block, where a
// product needs all of another's outputs.
// Every output element is computed by one thread in a fixed order: the logits do not depend
// on the thread count (test).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/memory.h"
#include "core/spin_barrier.h"
#include "infer/inference_model.h"
#include "kernels/int8_rows.h"
#include "kernels/rope.h"
#include "model/decoder_block.h"

namespace dqt {

// What the KV cache stores: fp32 (the training forward's values: decode gives the full
// forward's bits), or fp16 (half the bytes each decode step reads; the prompt then attends over
// the fp16-rounded keys and values too, so prompt and decode stay one function).
enum class KvCacheType { f32, f16 };
const char* kv_cache_type_name(KvCacheType type);
// "f32" or "f16"; dqt::Error naming both otherwise.
KvCacheType parse_kv_cache_type(const std::string& name);

// Keys and values of every layer for positions [0, length) after RoPE, in the layout
// attention_decode reads (kernels/attention.h): per kv head, keys in transposed tiles of 64
// positions and values as rows.
struct KvCache {
    KvCacheType type = KvCacheType::f32;
    int max_seq = 0;
    int key_stride = 0;    // attention_key_stride(max_seq)
    int value_stride = 0;  // attention_value_stride(max_seq, head_dim)
    int length = 0;      // positions filled
    // Per layer, of the cache's type (the other pair stays empty), category activations:
    std::vector<Array<float>> keys, values;         // (Hkv, key_stride / 64, D, 64), (Hkv, value_stride, D)
    std::vector<Array<Float16>> keys_f16, values_f16;
    KvCache(const ModelConfig& config, int max_seq, KvCacheType type);
    size_t bytes() const;
};

// The bytes a KvCache of max_seq positions allocates, known before it does.
double kv_cache_bytes(const ModelConfig& config, int max_seq, KvCacheType type);

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

    // One decode step of several sequences together: tokens[i] runs in sessions[i] at that
    // session's next position, against its own KV cache, and every weight is read once for
    // all of them (the products take one activation row per sequence). Returns the next-token
    // logits (n, V), row i for sessions[i], valid until sessions[0]'s next run, whose scratch
    // the step uses. Each row's logits are those of sessions[i]->run(&tokens[i], 1), bit for
    // bit (test): integer products are exact, dense ones (fp32 weights, an fp32 head) run a
    // row at a time, as a single decode does, and fp16 ones keep decode's order for every row,
    // so they round alike whatever shares the batch. dqt::Error (nothing changed) for a session listed twice, a full one, one
    // longer than sessions[0], or a token outside the vocabulary.
    static const float* run_batch(std::span<InferenceSession* const> sessions, const int32_t* tokens);

    int position() const { return cache_.length; }
    int max_seq() const { return cache_.max_seq; }
    void reset() { cache_.length = 0; }  // start a new sequence
    const KvCache& cache() const { return cache_; }

private:
    // The rows of the elementwise work between products (residual adds, norms, quantizing a
    // product's input). For a few tokens (decode) every thread does all of it on its own copy,
    // so threads meet only where a product needs another's outputs; for many (a prompt) the
    // threads split the rows of one shared copy and meet after each step.
    struct RowScratch {
        Array<float> x;       // (n, C) residual stream
        Array<float> normed;  // (n, C) a norm's output, the input of the next products
        Array<float> h_sub;   // (n, F) SubLN of the feed-forward's hidden rows
        Array<float> rstd;    // (n)
        Int8Rows dim_input;   // (n, C) quantized input of products over C
        Int8Rows ffn_input;   // (n, F) quantized input of w_down
        int capacity = 0;     // tokens the arrays hold
        // Grows the arrays to n tokens and shapes the Int8Rows to n rows.
        void reserve(const ModelConfig& config, int n);
    };
    // A thread's rows [first, last) of `scratch`; split: the threads meet after each step.
    struct RowShare {
        RowScratch* scratch;
        int first, last;
        bool split;
        int count() const { return last - first; }
    };
    // A product's input as one thread reads it: the fp32 rows, and their int8 quantization when
    // the product runs on the integer kernels.
    struct ProductInput {
        const float* rows;
        const Int8Rows* quantized;
    };
    struct LinearJob {
        const InferenceLinear* weight;
        float* out;  // (n, weight->rows)
    };
    // Grows the scratch to n tokens: the shared products', and the row scratch of the mode the
    // run uses (one per thread of `team`, or the shared copy when the rows are split).
    void reserve(int n, int team, bool split_rows);
    // One thread's part of the team's work: its rows of the elementwise work, its kv heads (their
    // q, k, v rows, RoPE, cache writes and attention) and its columns of the feed-forward.
    struct ThreadPart {
        RowShare rows;
        int n;  // token rows of the run
        int thread, threads;
        int kv_begin, kv_end;
        int ffn_begin, ffn_end;
    };
    // Thread `thread` of `threads`: the blocks of the forward over the n new tokens, the
    // elementwise rows split over the threads (shared_rows_) or repeated by each (per_thread_).
    void run_blocks(const int32_t* tokens, int n, bool split_rows, int thread, int threads);
    // This thread's part of one step of the decoder block (model/decoder_block.h) in `layer`.
    void run_step(const BlockStep& step, int layer, const ThreadPart& part);
    // Where a value of the block lives: the stream and the norms' outputs in the row scratch,
    // att and h in the team's shared buffers.
    float* value_rows(BlockValue value, RowScratch& rows);
    // Rows [first_row, last_row) of w times the input, into those columns of out (n, w.rows).
    void multiply(const InferenceLinear& w, const ProductInput& input, float* out, int n, int first_row,
                  int last_row) const;
    // multiply() of a dense or half w on fp32 input rows (n, w.cols), a gemm per block of rows;
    // block_weights(block, block_end) gives rows [block, block_end) of w in fp32.
    template <typename BlockWeights>
    void multiply_dense(const InferenceLinear& w, const float* input, float* out, int n, int first_row, int last_row,
                        BlockWeights block_weights) const;
    // Rows of a dense product's gemm, and of a half linear's widening: 64 x 2,560 floats (a 2B
    // model's head) are 640 KiB.
    static constexpr int kDenseBlockRows = 64;
    // This thread's even share of the jobs' weight rows (all jobs take `input`).
    void multiply_share(std::initializer_list<LinearJob> jobs, const ProductInput& input, int n, int thread,
                        int threads) const;
    // The product's input: the value's rows, and this thread's share of them quantized to int8
    // when `product` runs on the integer kernels; split rows meet here, the input whole.
    ProductInput prepare_input(BlockValue value, const InferenceLinear& product, const ThreadPart& part);
    // Where row i of a run goes: the cache it is stored in and attends over, at position pos.
    struct RowTarget {
        KvCache* cache;
        int pos;
    };
    // The forward of n rows bound for targets_ (run: this session's next positions; run_batch:
    // one row per session), their logits into logits_; the caches' lengths are the caller's.
    void forward(const int32_t* tokens, int n, LogitRows rows);
    // Attention of kv heads [kv_begin, kv_end) and their query heads over the n new tokens:
    // RoPE, the keys and values into the cache (rounded to what an fp16 cache holds), then their
    // attention into out (n, C).
    void attend(int layer, int n, int kv_begin, int kv_end, int thread, float* out);
    // The products of the head over every thread, gemm for a dense one (model_forward's call).
    void run_head(const float* x, int n);

    const InferenceModel& model_;
    KvCache cache_;
    RopeTable rope_;    // rotations of positions [0, max_seq), computed once
    std::vector<BlockStep> block_;    // the decoder block's steps (model/decoder_block.h)
    std::vector<RowTarget> targets_;  // (n) of the run under way
    bool one_row_products_ = false;   // a batch: dense products row by row (integer ones are exact anyway)
    SpinBarrier team_barrier_;  // where run_blocks' threads meet
    int capacity_ = 0;          // tokens the scratch below holds
    std::vector<RowScratch> per_thread_;  // one per thread of the team
    RowScratch shared_rows_;
    // Shared by the team; each product's output columns are written by one thread:
    Array<float> q_;       // (n, C)
    Array<float> k_;       // (n, Hkv, D) before they go to the cache
    Array<float> v_;       // (n, Hkv, D)
    Array<float> att_;     // (n, C)
    Array<float> proj_;    // (n, C)
    Array<float> gate_;    // (n, F)
    Array<float> up_;      // (n, F)
    Array<float> h_;       // (n, F)
    Array<float> normed_;  // (n, C) the head's input
    Array<float> rstd_;    // (n)
    Array<float> logits_;  // (n, V) or (1, V)
    Int8Rows quantized_;   // the head's quantized input
};

}  // namespace dqt
