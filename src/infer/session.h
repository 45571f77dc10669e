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
#include "core/row_dealer.h"
#include "core/spin_barrier.h"
#include "infer/inference_model.h"
#include "kernels/int8_rows.h"
#include "kernels/rope.h"
#include "model/decoder_block.h"

namespace dqt {

// What the KV cache stores: fp32 (the training forward's values: decode gives the full
// forward's bits), fp16 (half the bytes each decode step reads), or int8 codes with a scale per
// head and position (a little over a quarter; kernels/attention.h). With fp16 and int8 the
// prompt attends over the rounded keys and values too, so prompt and decode stay one function.
enum class KvCacheType { f32, f16, int8 };
const char* kv_cache_type_name(KvCacheType type);
// "f32", "f16" or "int8"; dqt::Error naming them otherwise.
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
    // Per layer, of the cache's type (the others stay empty), category activations:
    std::vector<Array<float>> keys, values;         // (Hkv, key_stride / 64, D, 64), (Hkv, value_stride, D)
    std::vector<Array<Float16>> keys_f16, values_f16;
    std::vector<Array<int8_t>> keys_int8, values_int8;
    std::vector<Array<float>> key_scales, value_scales;  // int8: (Hkv, key_stride), (Hkv, value_stride)
    KvCache(const ModelConfig& config, int max_seq, KvCacheType type);
    size_t bytes() const;
};

// The bytes a KvCache of max_seq positions allocates, known before it does.
double kv_cache_bytes(const ModelConfig& config, int max_seq, KvCacheType type);
// The keys and values of one position over all layers: what each position a decode step
// attends to reads from the cache (kv_cache_bytes holds max_seq of them, plus padding).
double kv_bytes_per_position(const ModelConfig& config, KvCacheType type);

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

    // One sequence's rows of a batch: tokens [0, count) run in `session` at its next positions,
    // keeping the logits of its last token, or of every token (`logits`).
    struct BatchPart {
        InferenceSession* session;
        const int32_t* tokens;
        int count;
        LogitRows logits = LogitRows::last;
    };
    // One step of several sequences together (a server's live decodes, one token each, and new
    // prompts' chunks): every part's tokens run in its session against its own KV cache, and
    // every weight is read once for all of them (the products take all the parts' activation
    // rows). The step runs in workspace's scratch: one of the parts' sessions, or none of them,
    // whose sequence is at least as long as every part's (the step uses its RoPE table).
    // Returns the logits each part keeps, parts in order: (kept rows, V), valid until
    // workspace's next run. Each part's logits are those of
    // parts[i].session->run(tokens, count, logits), bit for bit (test): integer products are
    // exact, and dense (fp32 weights, an fp32 head) and half ones compute each part's rows as
    // run() would alone: a chunk's rows in one gemm, one-token parts a row at a time.
    // dqt::Error (nothing changed) for a session listed twice, an empty part, one that does not
    // fit its session's context, a session longer than workspace's, or a token outside the
    // vocabulary.
    static const float* run_batch(InferenceSession& workspace, std::span<const BatchPart> parts);

    // Grows the scratch now for runs of up to `rows` tokens of which up to `logit_rows` keep
    // their logits, so that no such run allocates later: a server sizes its memory once, at
    // start-up, rather than to the largest batch its load happens to bring.
    void reserve(int rows, int logit_rows);

    // Bytes of the forward scratch the session holds now (its cache's are cache().bytes()).
    size_t scratch_bytes() const;

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
    // Grows the scratch to n tokens of which head_rows go through the head: the shared
    // products', the head's, and the row scratch of the mode the run uses (one per thread of
    // `team`, or the shared copy when the rows are split).
    void reserve(int n, int head_rows, int team, bool split_rows);
    // One thread's part of the team's work: its rows of the elementwise work, its kv heads (their
    // q, k and v rows, and where the heads split evenly over the threads also their RoPE, cache
    // writes and attention: see attend); the products' rows it runs are dealt as it goes.
    struct ThreadPart {
        RowShare rows;
        int n;  // token rows of the run
        int thread, threads;
        int kv_begin, kv_end;
        int64_t dealt = 0;  // rows row_dealer_ dealt before this thread's current phase
    };
    // Thread `thread` of `threads`: the blocks of the forward over the n new tokens, the
    // elementwise rows split over the threads (shared_rows_) or repeated by each (per_thread_).
    void run_blocks(const int32_t* tokens, int n, bool split_rows, int thread, int threads);
    // This thread's part of one step of the decoder block (model/decoder_block.h) in `layer`.
    void run_step(const BlockStep& step, int layer, ThreadPart& part);
    // Where a value of the block lives: the stream and the norms' outputs in the row scratch,
    // att and h in the team's shared buffers.
    float* value_rows(BlockValue value, RowScratch& rows);
    // Rows [first_row, first_row + rows) of a run: one sequence's tokens, stored in `cache` at
    // positions pos .. and attending over it.
    struct RowGroup {
        KvCache* cache;
        int pos;
        int first_row, rows;
        LogitRows logits;  // the rows whose logits it keeps
        // How many of its rows keep their logits, counted from its last: all, or the last one.
        int kept_rows() const { return logits == LogitRows::all ? rows : 1; }
    };
    // Rows a dense or half product computes together, as run() computes one sequence's rows
    // alone: a group of several rows (a prompt or its chunk) in one gemm (`whole`), a stretch of
    // one-row groups (a batch's decodes) a row at a time, each rounding as a lone decode does.
    struct ProductRows {
        int first, count;
        bool whole;
        int rows_per_product() const { return whole ? count : 1; }
    };
    // runs = the rows of `groups` as ProductRows, numbered consecutively: every row of each
    // group (the blocks'), or only the rows each keeps logits of (the head's).
    static void plan_product_rows(std::span<const RowGroup> groups, bool kept_only, std::vector<ProductRows>& runs);
    // Weight rows [first_row, last_row) of w times the input's rows, into those columns of out
    // (n, w.rows); `rows` covers the input's n rows.
    void multiply(const InferenceLinear& w, const ProductInput& input, float* out, std::span<const ProductRows> rows,
                  int first_row, int last_row) const;
    // multiply() of a dense or half w on fp32 input rows (n, w.cols), a gemm of rows_per_gemm
    // rows per block of weight rows; block_weights(block, block_end) gives rows [block,
    // block_end) of w in fp32.
    template <typename BlockWeights>
    void multiply_dense(const InferenceLinear& w, const float* input, float* out, int n, int rows_per_gemm,
                        int first_row, int last_row, BlockWeights block_weights) const;
    // Rows of a dense product's gemm, and of a half linear's widening: 64 x 2,560 floats (a 2B
    // model's head) are 640 KiB.
    static constexpr int kDenseBlockRows = 64;
    // Rows [begin, end) of the jobs' weight rows counted across the jobs in order (all jobs take
    // `input`); a job outside the range runs an empty range.
    void multiply_jobs_rows(std::initializer_list<LinearJob> jobs, const ProductInput& input,
                            std::span<const ProductRows> rows, int begin, int end) const;
    // This thread's even share of the jobs' weight rows (all jobs take `input`).
    void multiply_share(std::initializer_list<LinearJob> jobs, const ProductInput& input,
                        std::span<const ProductRows> rows, int thread, int threads) const;
    // The jobs' weight rows (all jobs take `input`) that row_dealer_ deals this thread, one
    // phase of the blocks' team.
    void multiply_dealt(std::initializer_list<LinearJob> jobs, const ProductInput& input, ThreadPart& part);
    // The product's input: the value's rows, and this thread's share of them quantized to int8
    // when `product` runs on the integer kernels; split rows meet here, the input whole.
    ProductInput prepare_input(BlockValue value, const InferenceLinear& product, const ThreadPart& part);
    // The forward of the n rows of groups_, then the head on the rows each group keeps logits
    // of, into logits_; the caches' lengths are the caller's.
    void forward(const int32_t* tokens, int n);
    // This thread's attention over the rows of groups_, each group in its cache: RoPE, the keys
    // and values into the cache (rounded to what an fp16 cache holds), then the attention into
    // out (n, C). Where the kv heads split evenly over the threads, kv heads [kv_begin, kv_end)
    // of every group (the thread computed only their q, k and v); otherwise its share of all
    // (group, kv head) pairs, so that 5 kv heads over 2 threads still give each an equal part.
    void attend(int layer, const ThreadPart& part, float* out);
    // The final norm of the residual rows head_sources_ of x, then the head's products over
    // every thread.
    void run_head(const float* x);

    const InferenceModel& model_;
    KvCache cache_;
    RopeTable rope_;    // rotations of positions [0, max_seq), computed once
    std::vector<BlockStep> block_;    // the decoder block's steps (model/decoder_block.h)
    // Of the run under way:
    std::vector<RowGroup> groups_;       // the sequences' rows, in row order
    std::vector<ProductRows> block_rows_;  // groups_ as the blocks' dense products take them
    std::vector<int> head_sources_;      // (head rows) the residual row each head row reads
    std::vector<ProductRows> head_rows_;   // the head's rows as its dense product takes them
    std::vector<int32_t> batch_tokens_;  // run_batch: the parts' tokens, in row order
    SpinBarrier team_barrier_;  // where run_blocks' threads meet
    RowDealer row_dealer_;      // deals run_blocks' products' rows to its threads
    int capacity_ = 0;          // tokens the blocks' scratch below holds
    int head_capacity_ = 0;     // rows the head's scratch below holds
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
    // The head's, over the head rows h (those whose logits are kept):
    Array<float> normed_;  // (h, C) the head's input
    Array<float> rstd_;    // (h)
    Array<float> logits_;  // (h, V)
    Int8Rows quantized_;   // (h, C) the head's quantized input
};

}  // namespace dqt
