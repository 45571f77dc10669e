#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/float16_widen.h"
#include "kernels/int8_rows.h"
#include "kernels/vecmath.h"

namespace dqt {
namespace {

// The four matrix products of attention run through one register tile: kTileRows x
// kTileCols outputs accumulate in vector registers while the reduction index streams by.
// Tiles start at multiples of kTileRows, so causality is exploited at tile granularity. This
// beat gemm() (oneDNN) on per-(batch, head) row blocks, which computes whole blocks of the
// masked triangle: forward 6.4 vs 9.4 ms on one thread at batch 8, seq 256, 4 heads, dim 64.
// A tile row is held as Parts, GCC vectors of the register width of the instruction-set level
// the per-head functions are compiled for (run_at_cpu_level below): GCC lowers a vector wider
// than the target's registers through the stack, so a 16-float row on AVX2 was stored and
// reloaded at every step (a third of a 2B model's decode on a Zen 3). Each output element is a
// chain of multiply-adds from zero, in order, whatever the width: the width changes no bits.
// Helpers are always_inline, and the levels' entry points flatten, so that each level gets
// them compiled for its own instruction set rather than calling a baseline copy.
constexpr int kTileRows = 4;
constexpr int kTileCols = 16;
using Wide = float __attribute__((vector_size(16 * sizeof(float))));    // x86-64-v4: one AVX-512 register
using Half = float __attribute__((vector_size(8 * sizeof(float))));     // x86-64-v3: one AVX2 register
using Quarter = float __attribute__((vector_size(4 * sizeof(float))));  // baseline x86-64: one SSE register

template <typename Part>
inline constexpr int kPartLanes = sizeof(Part) / sizeof(float);

// kTileCols floats as Parts.
template <typename Part>
struct TileRow {
    static constexpr int kParts = kTileCols / kPartLanes<Part>;
    Part parts[kParts];
};
template <typename Part>
using Tile = TileRow<Part>[kTileRows];

int round_up(int n, int multiple) { return (n + multiple - 1) / multiple * multiple; }

// Part by part: one memcpy of the whole row made GCC copy it through the stack.
template <typename Part>
[[gnu::always_inline]] inline void load_row(TileRow<Part>& row, const float* p) {
#pragma GCC unroll 4
    for (int i = 0; i < TileRow<Part>::kParts; ++i) std::memcpy(&row.parts[i], p + i * kPartLanes<Part>, sizeof(Part));
}

template <typename Part>
[[gnu::always_inline]] inline void store_row(float* p, const TileRow<Part>& row) {
#pragma GCC unroll 4
    for (int i = 0; i < TileRow<Part>::kParts; ++i) std::memcpy(p + i * kPartLanes<Part>, &row.parts[i], sizeof(Part));
}

// p[0 .. width) = the row's first width floats.
template <typename Part>
[[gnu::always_inline]] inline void store_row_prefix(float* p, const TileRow<Part>& row, int width) {
    float all[kTileCols];
    store_row(all, row);
    for (int l = 0; l < width; ++l) p[l] = all[l];
}

template <typename Part>
[[gnu::always_inline]] inline void add_row(float* p, const TileRow<Part>& row) {
    TileRow<Part> sum;
    load_row(sum, p);
#pragma GCC unroll 4
    for (int i = 0; i < TileRow<Part>::kParts; ++i) sum.parts[i] += row.parts[i];
    store_row(p, sum);
}

// acc += s * b.
template <typename Part>
[[gnu::always_inline]] inline void multiply_add(TileRow<Part>& acc, float s, const TileRow<Part>& b) {
#pragma GCC unroll 4
    for (int i = 0; i < TileRow<Part>::kParts; ++i) acc.parts[i] += s * b.parts[i];
}

// acc[r][l] += sum_{k0 <= k < k1} a[r][k * a_step] * b[k * ldb + l].
template <typename Part>
[[gnu::always_inline]] inline void tile_accumulate(Tile<Part>& acc, const float* const* a, ptrdiff_t a_step,
                                                   const float* b, ptrdiff_t ldb, int k0, int k1) {
    static_assert(kTileRows == 4, "the accumulators below are spelled out so they stay in registers");
    TileRow<Part> c0 = acc[0], c1 = acc[1], c2 = acc[2], c3 = acc[3];
    for (int k = k0; k < k1; ++k) {
        TileRow<Part> bk;
        load_row(bk, b + k * ldb);
        multiply_add(c0, a[0][k * a_step], bk);
        multiply_add(c1, a[1][k * a_step], bk);
        multiply_add(c2, a[2][k * a_step], bk);
        multiply_add(c3, a[3][k * a_step], bk);
    }
    acc[0] = c0;
    acc[1] = c1;
    acc[2] = c2;
    acc[3] = c3;
}

// Row pointers of one tile; rows past the end repeat the last row (computed, never stored).
[[gnu::always_inline]] inline void tile_rows(const float* (&rows)[kTileRows], const float* base, ptrdiff_t stride,
                                             int first, int count) {
    for (int r = 0; r < kTileRows; ++r) rows[r] = base + std::min(first + r, count - 1) * stride;
}

// Shapes of one (batch, head) problem. Rows of q/out/dq/dout are q_stride floats apart, rows of
// k/v/dk/dv kv_stride apart; the padded sizes let tiles run past the edges into zeros.
struct Dims {
    int seq, head_dim;
    int seq_pad, dim_pad;  // rounded up to kTileCols
    ptrdiff_t q_stride, kv_stride;
    float scale;

    Dims(int seq_, int heads, int kv_heads, int head_dim_)
        : seq(seq_), head_dim(head_dim_), seq_pad(round_up(seq_, kTileCols)),
          dim_pad(round_up(head_dim_, kTileCols)), q_stride(static_cast<ptrdiff_t>(heads) * head_dim_),
          kv_stride(static_cast<ptrdiff_t>(kv_heads) * head_dim_),
          scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim_)))) {}

    // Sizes of the per-thread buffers.
    size_t transposed() const { return static_cast<size_t>(head_dim) * seq_pad; }  // (head_dim, seq_pad)
    size_t rows() const { return static_cast<size_t>(seq) * dim_pad; }              // (seq, dim_pad)
    size_t tile_row() const { return static_cast<size_t>(kTileRows) * seq_pad; }    // (kTileRows, seq_pad)
};

// dst rows 0..7 (ld_dst apart) = columns 0..7 of src rows 0..7 (ld_src apart), by shuffles in
// registers: element by element, the transposes took about a tenth of the forward.
[[gnu::always_inline]] inline void transpose_8x8(float* dst, ptrdiff_t ld_dst, const float* src, ptrdiff_t ld_src) {
    Half r[8], t[8];
    for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * ld_src, sizeof(Half));
    // Interleave row pairs: t[2m] holds columns {0,1,4,5} and t[2m+1] columns {2,3,6,7} of rows 2m, 2m+1.
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    // r[i + c] (c < 4) holds columns c and c + 4 of rows i..i+3.
    for (int i = 0; i < 8; i += 4) {
        r[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        r[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        r[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        r[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int c = 0; c < 4; ++c) {
        t[c] = __builtin_shufflevector(r[c], r[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        t[c + 4] = __builtin_shufflevector(r[c], r[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int i = 0; i < 8; ++i) std::memcpy(dst + i * ld_dst, &t[i], sizeof(Half));
}

// dst (head_dim, seq_pad) = transpose of src (seq rows, stride apart). Padding is never written.
[[gnu::always_inline]] inline void transpose_into(float* dst, const float* src, ptrdiff_t stride, const Dims& dm) {
    const int T = dm.seq, D = dm.head_dim, T8 = T / 8 * 8, D8 = D / 8 * 8;
    for (int t = 0; t < T8; t += 8)
        for (int d = 0; d < D8; d += 8)
            transpose_8x8(dst + d * dm.seq_pad + t, dm.seq_pad, src + t * stride + d, stride);
    // Edges that do not fill an 8 x 8 block.
    for (int t = 0; t < T; ++t)
        for (int d = t < T8 ? D8 : 0; d < D; ++d) dst[static_cast<ptrdiff_t>(d) * dm.seq_pad + t] = src[t * stride + d];
}

// dst (seq, dim_pad) = src (seq rows, stride apart). Padding is never written.
[[gnu::always_inline]] inline void copy_into(float* dst, const float* src, ptrdiff_t stride, const Dims& dm) {
    for (int t = 0; t < dm.seq; ++t)
        for (int d = 0; d < dm.head_dim; ++d) dst[static_cast<ptrdiff_t>(t) * dm.dim_pad + d] = src[t * stride + d];
}

// dst (seq rows, stride apart) += src (seq, dim_pad). Done once per head in a separate pass:
// the gradient rows are usually out of cache, and here their loads overlap.
[[gnu::always_inline]] inline void add_rows(float* dst, ptrdiff_t stride, const float* src, const Dims& dm) {
    for (int t = 0; t < dm.seq; ++t)
        for (int d = 0; d < dm.head_dim; ++d) dst[t * stride + d] += src[static_cast<ptrdiff_t>(t) * dm.dim_pad + d];
}

// p (seq) = causal softmax of scale * s over the first n entries, zero after them.
[[gnu::always_inline]] inline void softmax_row(float* p, const float* s, int n, int seq, float scale) {
    const float shift = max_f32(s, n) * scale;  // scale > 0, so max and scaling commute
    for (int j = 0; j < n; ++j) p[j] = exp_f32(s[j] * scale - shift);
    const float inv = 1.0f / sum_f32(p, n);
    for (int j = 0; j < n; ++j) p[j] *= inv;
    std::fill(p + n, p + seq, 0.0f);
}

// Per-thread buffers, carved from one accounted allocation.
class Carver {
public:
    explicit Carver(size_t floats) : storage_(MemCategory::scratch, floats), next_(storage_.data()) {}
    explicit Carver(float* memory) : next_(memory) {}  // the caller's memory, of the size asked
    float* take(size_t floats) {
        float* p = next_;
        next_ += floats;
        return p;
    }

private:
    Array<float> storage_;
    float* next_;
};

// Forward: keys of one kv head transposed and its values padded, laid out for the tiles.
struct ForwardWorkspace {
    Carver carver;
    float* k_t;     // (head_dim, seq_pad)
    float* v_rows;  // (seq, dim_pad)
    float* scores;  // (kTileRows, seq_pad) one tile row of scores
    float* probs;   // (kTileRows, seq_pad) their softmax, when the caller saves no probs

    static size_t floats(const Dims& dm) { return dm.transposed() + dm.rows() + 2 * dm.tile_row(); }
    explicit ForwardWorkspace(const Dims& dm) : ForwardWorkspace(dm, Carver(floats(dm))) {}
    ForwardWorkspace(const Dims& dm, float* memory) : ForwardWorkspace(dm, Carver(memory)) {}

private:
    ForwardWorkspace(const Dims& dm, Carver&& from)
        : carver(std::move(from)),
          k_t(carver.take(dm.transposed())),
          v_rows(carver.take(dm.rows())),
          scores(carver.take(dm.tile_row())),
          probs(carver.take(dm.tile_row())) {}
};

// Backward: the kv head's keys and transposed values, one query head's queries and output
// gradient, and the gradients (dk, dv summed over the group's query heads).
struct BackwardWorkspace {
    Carver carver;
    float* v_t;      // (head_dim, seq_pad)
    float* k_rows;   // (seq, dim_pad)
    float* q_rows;   // (seq, dim_pad)
    float* do_rows;  // (seq, dim_pad)
    float* dq_acc;   // (seq, dim_pad)
    float* dk_acc;   // (seq, dim_pad)
    float* dv_acc;   // (seq, dim_pad)
    float* scores;   // (kTileRows, seq_pad) one tile row of score gradients

    explicit BackwardWorkspace(const Dims& dm)
        : carver(dm.transposed() + 6 * dm.rows() + dm.tile_row()),
          v_t(carver.take(dm.transposed())),
          k_rows(carver.take(dm.rows())),
          q_rows(carver.take(dm.rows())),
          do_rows(carver.take(dm.rows())),
          dq_acc(carver.take(dm.rows())),
          dk_acc(carver.take(dm.rows())),
          dv_acc(carver.take(dm.rows())),
          scores(carver.take(dm.tile_row())) {}
};

// One (batch, head): q, out (seq rows, q_stride apart); k, v (seq rows, kv_stride apart) of
// its kv head; probs (seq, seq), or null to keep only one tile row of them at a time.
template <typename Part>
[[gnu::always_inline]] inline void forward_head(float* out, float* probs, const float* q, const float* k,
                                                const float* v, const Dims& dm, ForwardWorkspace& ws) {
    const int T = dm.seq, D = dm.head_dim;
    transpose_into(ws.k_t, k, dm.kv_stride, dm);
    copy_into(ws.v_rows, v, dm.kv_stride, dm);
    const float* rows[kTileRows];
    for (int i0 = 0; i0 < T; i0 += kTileRows) {
        const int valid = std::min(kTileRows, T - i0);
        const int j_end = std::min(T, i0 + kTileRows);  // causal: keys 0 .. last row of the tile
        // scores = q k^T for this tile row
        tile_rows(rows, q, dm.q_stride, i0, T);
        for (int j0 = 0; j0 < j_end; j0 += kTileCols) {
            Tile<Part> acc = {};
            tile_accumulate<Part>(acc, rows, 1, ws.k_t + j0, dm.seq_pad, 0, D);
            for (int r = 0; r < kTileRows; ++r)
                store_row(ws.scores + r * dm.seq_pad + j0, acc[r]);
        }
        // This tile row's probabilities: in probs when they are saved, else in the workspace.
        float* tile_probs = probs != nullptr ? probs + static_cast<ptrdiff_t>(i0) * T : ws.probs;
        const ptrdiff_t probs_stride = probs != nullptr ? T : dm.seq_pad;
        for (int r = 0; r < valid; ++r)
            softmax_row(tile_probs + r * probs_stride, ws.scores + r * dm.seq_pad, i0 + r + 1, T, dm.scale);
        // out = probs v
        tile_rows(rows, tile_probs, probs_stride, 0, valid);
        for (int d0 = 0; d0 < D; d0 += kTileCols) {
            Tile<Part> acc = {};
            tile_accumulate<Part>(acc, rows, 1, ws.v_rows + d0, dm.dim_pad, 0, j_end);
            const int width = std::min(kTileCols, D - d0);
            for (int r = 0; r < valid; ++r) store_row_prefix(out + (i0 + r) * dm.q_stride + d0, acc[r], width);
        }
    }
}

// One (batch, kv head) and its `group` query heads, so that dk and dv have a single writer.
// q, dq, dout point at the first query head of the group (seq rows, q_stride apart; head g at
// + g * head_dim); k, v, dk, dv (seq rows, kv_stride apart); probs, dscores (group, seq, seq).
template <typename Part>
[[gnu::always_inline]] inline void backward_kv_head(float* dq, float* dk, float* dv, float* dscores, const float* dout,
                                                    const float* q, const float* k, const float* v, const float* probs,
                                                    int group, const Dims& dm, BackwardWorkspace& ws) {
    const int T = dm.seq, D = dm.head_dim;
    const ptrdiff_t TT = static_cast<ptrdiff_t>(T) * T;
    copy_into(ws.k_rows, k, dm.kv_stride, dm);
    transpose_into(ws.v_t, v, dm.kv_stride, dm);
    const size_t rows_size = dm.rows();
    std::fill(ws.dk_acc, ws.dk_acc + rows_size, 0.0f);
    std::fill(ws.dv_acc, ws.dv_acc + rows_size, 0.0f);
    const float* rows[kTileRows];
    for (int g = 0; g < group; ++g) {
        const float* p = probs + g * TT;  // (seq, seq)
        float* ds = dscores + g * TT;     // (seq, seq) gradient of the scaled scores
        copy_into(ws.q_rows, q + g * D, dm.q_stride, dm);
        copy_into(ws.do_rows, dout + g * D, dm.q_stride, dm);
        std::fill(ws.dq_acc, ws.dq_acc + rows_size, 0.0f);
        for (int i0 = 0; i0 < T; i0 += kTileRows) {
            const int valid = std::min(kTileRows, T - i0);
            const int j_end = std::min(T, i0 + kTileRows);
            // dprobs = dout v^T
            tile_rows(rows, ws.do_rows, dm.dim_pad, i0, T);
            for (int j0 = 0; j0 < j_end; j0 += kTileCols) {
                Tile<Part> acc = {};
                tile_accumulate<Part>(acc, rows, 1, ws.v_t + j0, dm.seq_pad, 0, D);
                for (int r = 0; r < kTileRows; ++r)
                    store_row(ws.scores + r * dm.seq_pad + j0, acc[r]);
            }
            // Softmax backward: ds_ij = p_ij (dp_ij - sum_l p_il dp_il) * scale. Entries
            // j_end > j > i are zeroed because the dk tiles below read them.
            for (int r = 0; r < valid; ++r) {
                const int i = i0 + r;
                const float* p_row = p + static_cast<ptrdiff_t>(i) * T;
                const float* dp_row = ws.scores + r * dm.seq_pad;
                float* ds_row = ds + static_cast<ptrdiff_t>(i) * T;
                const float pdp = dot_f32(p_row, dp_row, i + 1);
                for (int j = 0; j <= i; ++j) ds_row[j] = p_row[j] * (dp_row[j] - pdp) * dm.scale;
                std::fill(ds_row + i + 1, ds_row + j_end, 0.0f);
            }
            // dq += ds k
            tile_rows(rows, ds, T, i0, T);
            for (int d0 = 0; d0 < D; d0 += kTileCols) {
                Tile<Part> acc = {};
                tile_accumulate<Part>(acc, rows, 1, ws.k_rows + d0, dm.dim_pad, 0, j_end);
                for (int r = 0; r < valid; ++r) add_row(ws.dq_acc + (i0 + r) * dm.dim_pad + d0, acc[r]);
            }
        }
        add_rows(dq + g * D, dm.q_stride, ws.dq_acc, dm);
        // dk += ds^T q and dv += p^T dout: tile rows are columns of ds and p, and only query
        // rows i >= j contribute to key j.
        for (int j0 = 0; j0 < T; j0 += kTileRows) {
            const int valid = std::min(kTileRows, T - j0);
            for (int d0 = 0; d0 < D; d0 += kTileCols) {
                Tile<Part> acc = {};
                tile_rows(rows, ds, 1, j0, T);
                tile_accumulate<Part>(acc, rows, T, ws.q_rows + d0, dm.dim_pad, j0, T);
                for (int r = 0; r < valid; ++r) add_row(ws.dk_acc + (j0 + r) * dm.dim_pad + d0, acc[r]);
                Tile<Part> acc_v = {};
                tile_rows(rows, p, 1, j0, T);
                tile_accumulate<Part>(acc_v, rows, T, ws.do_rows + d0, dm.dim_pad, j0, T);
                for (int r = 0; r < valid; ++r) add_row(ws.dv_acc + (j0 + r) * dm.dim_pad + d0, acc_v[r]);
            }
        }
    }
    add_rows(dk, dm.kv_stride, ws.dk_acc, dm);
    add_rows(dv, dm.kv_stride, ws.dv_acc, dm);
}

// A part of cache entries as floats: fp32 as they are, fp16 and int8 codes widened (exactly),
// so that a narrow cache is read at its own bytes with the same arithmetic after.
template <typename Part>
[[gnu::always_inline]] inline void load_part(Part& part, const float* p) {
    std::memcpy(&part, p, sizeof part);
}

// GCC 12's convert intrinsic trips its own uninitialised-value warnings (an undefined merge
// source inside the intrinsic).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Not always_inline: decode_head is generic code; run_at_v4 and run_at_v3 flatten it in. The
// baseline level has no conversion instruction: an fp16 cache is widened before decode there.
__attribute__((target("avx512f"))) inline void load_part(Wide& part, const Float16* p) {
    const __m512 wide = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&part, &wide, sizeof part);
}

__attribute__((target("avx2,f16c"))) inline void load_part(Half& part, const Float16* p) {
    const __m256 wide = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    std::memcpy(&part, &wide, sizeof part);
}

// An int8 cache's codes, widened (exactly) by two instructions; the baseline level widens first.
__attribute__((target("avx512f"))) inline void load_part(Wide& part, const int8_t* p) {
    const __m512 wide = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    std::memcpy(&part, &wide, sizeof part);
}

__attribute__((target("avx2"))) inline void load_part(Half& part, const int8_t* p) {
    const __m256 wide = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    std::memcpy(&part, &wide, sizeof part);
}

#pragma GCC diagnostic pop

// f(std::integral_constant<int, min(count, Max)>()), count >= 1: a run-time count made the
// constant that keeps an array of accumulators in registers (with a run-time bound GCC keeps
// it on the stack).
template <int Max, typename F>
[[gnu::always_inline]] inline void with_constant(int count, F&& f) {
    if constexpr (Max > 1) {
        if (count < Max) return with_constant<Max - 1>(count, f);
    }
    f(std::integral_constant<int, Max>());
}

// Scores of one query row against Chains parts of one key tile (positions j0..); the row's
// probabilities' weighted sum of Chains parts of value columns from d0.
template <typename Part, int Chains, typename Cache>
[[gnu::always_inline]] inline void score_parts(float* scores, const float* q, const Cache* key_tile, int head_dim) {
    Part acc[Chains] = {};
    for (int d = 0; d < head_dim; ++d) {
        const float qd = q[d];
#pragma GCC unroll 16
        for (int c = 0; c < Chains; ++c) {
            Part keys;
            load_part(keys, key_tile + static_cast<ptrdiff_t>(d) * kAttentionKeyTile + c * kPartLanes<Part>);
            acc[c] += qd * keys;
        }
    }
#pragma GCC unroll 16
    for (int c = 0; c < Chains; ++c) std::memcpy(scores + c * kPartLanes<Part>, &acc[c], sizeof acc[c]);
}

template <typename Part, int Chains, typename Cache>
[[gnu::always_inline]] inline void weigh_value_parts(float* out, const float* probs, const Cache* v,
                                                     ptrdiff_t v_row_stride, int n, int d0, int head_dim) {
    Part acc[Chains] = {};
    for (int j = 0; j < n; ++j) {
        const float pj = probs[j];
#pragma GCC unroll 16
        for (int c = 0; c < Chains; ++c) {
            Part values;
            load_part(values, v + j * v_row_stride + d0 + c * kPartLanes<Part>);
            acc[c] += pj * values;
        }
    }
#pragma GCC unroll 16
    for (int c = 0; c < Chains; ++c) {
        const int first = d0 + c * kPartLanes<Part>, width = std::min(kPartLanes<Part>, head_dim - first);
        for (int l = 0; l < width; ++l) out[first + l] = acc[c][l];
    }
}

// The scales of one kv head's positions in an int8 cache: its scores are multiplied by their
// keys' scales before the softmax, and its probabilities by their values' scales, which then
// weigh the values' codes. Float caches have none (NoScales: not even a branch, which changed how
// GCC contracted the softmax and so decode's bits).
struct NoScales {};
struct PositionScales {
    const float* keys;    // (positions)
    const float* values;  // (positions)
};
[[gnu::always_inline]] inline void scale_scores(float*, NoScales, int) {}
[[gnu::always_inline]] inline void scale_probs(float*, NoScales, int) {}
[[gnu::always_inline]] inline void scale_scores(float* scores, PositionScales scales, int n) {
    for (int j = 0; j < n; ++j) scores[j] *= scales.keys[j];
}
[[gnu::always_inline]] inline void scale_probs(float* probs, PositionScales scales, int n) {
    for (int j = 0; j < n; ++j) probs[j] *= scales.values[j];
}

// One query row against keys 0..pos, with the per-element arithmetic of forward_head's tiles
// (each score and output element a chain of multiply-adds from zero, in the same order), so
// decode gives the bits of the full forward's row pos over the same keys and values. q, out
// (head_dim); key_tiles this kv head's keys in the cache's tiles (attention.h); v (pos + 1 rows,
// v_row_stride apart, readable kTileCols entries past head_dim); scales: an int8 cache's
// (PositionScales) or NoScales; scores, probs (round_up(pos + 1, kTileCols)).
template <typename Part, typename Cache, typename Scales>
[[gnu::always_inline]] inline void decode_head(float* out, const float* q, const Cache* key_tiles, const Cache* v,
                                               ptrdiff_t v_row_stride, Scales scales, int pos, int head_dim,
                                               float scale, float* scores, float* probs) {
    // Up to a key tile's parts advance together: independent chains hide the multiply-add
    // latency, each keeps its own order, and the chains read one stream.
    constexpr int kChains = kAttentionKeyTile / kPartLanes<Part>;
    const auto parts = [](int columns) { return (columns + kPartLanes<Part> - 1) / kPartLanes<Part>; };
    const int n = pos + 1;
    for (int j0 = 0; j0 < n; j0 += kAttentionKeyTile) {
        const Cache* key_tile = key_tiles + static_cast<ptrdiff_t>(j0 / kAttentionKeyTile) * head_dim * kAttentionKeyTile;
        with_constant<kChains>(parts(n - j0), [&](auto chains) {
            score_parts<Part, chains()>(scores + j0, q, key_tile, head_dim);
        });
    }
    scale_scores(scores, scales, n);
    softmax_row(probs, scores, n, n, scale);
    scale_probs(probs, scales, n);
    for (int d0 = 0; d0 < head_dim; d0 += kChains * kPartLanes<Part>) {
        with_constant<kChains>(parts(head_dim - d0), [&](auto chains) {
            weigh_value_parts<Part, chains()>(out, probs, v, v_row_stride, n, d0, head_dim);
        });
    }
}

// A prefetch into L2 of the cache 4 KiB past part c of a contiguous run of parts being loaded,
// issued for the parts that start a 64-byte line only: a narrow cache's parts share lines (an f16
// line holds 2 parts of 16 lanes, an int8 line 4), and one a line, not one a part, made 8 streams
// at 512 positions 1-4% faster (docs/results.md, "An int8 KV cache against context"). A decode
// step's cache reads are short runs (a kv head's keys, then its values), each a fresh start for
// the hardware prefetcher. With the prefetch, and a kv head's query heads together, 8 streams of
// 496 positions of the 2.09B file decoded 8-10% faster from an f16 cache (docs/results.md, "Eight
// streams against context"). Past the cache's end it does not fault.
template <typename Part, typename Cache>
[[gnu::always_inline]] inline void prefetch_ahead(const Cache* part, int c) {
    if (c * kPartLanes<Part> * sizeof(Cache) % 64 == 0)
        __builtin_prefetch(reinterpret_cast<const char*>(part) + 4096, 0, 2);
}

// The cache bytes [next, end) that the next kv head's attention will read, fetched into L2 one
// line per iteration of this head's loops, so that its reads overlap this head's arithmetic. At
// 512 positions a step's attention took about 7 ms of arithmetic beside reads that already ran
// at the read limit, one after the other (docs/results.md, "An int8 KV cache against context").
struct NextRun {
    const char* next = nullptr;
    const char* end = nullptr;
    [[gnu::always_inline]] void prefetch_line() {
        if (next < end) {
            __builtin_prefetch(next, 0, 2);
            next += 64;
        }
    }
};

struct NextHead {
    NextRun keys, values;
};

// score_parts for R query rows (q_stride apart) at once: each key part is loaded once for the
// R rows, and each row's chains are score_parts', in its order. next_keys: see NextRun.
template <typename Part, int R, int Chains, typename Cache>
[[gnu::always_inline]] inline void score_rows(float* scores, ptrdiff_t scores_stride, const float* q,
                                              ptrdiff_t q_stride, const Cache* key_tile, int head_dim,
                                              NextRun& next_keys) {
    Part acc[R][Chains] = {};
    for (int d = 0; d < head_dim; ++d) {
        next_keys.prefetch_line();
        Part keys[Chains];
#pragma GCC unroll 16
        for (int c = 0; c < Chains; ++c) {
            load_part(keys[c], key_tile + static_cast<ptrdiff_t>(d) * kAttentionKeyTile + c * kPartLanes<Part>);
            prefetch_ahead<Part>(key_tile + static_cast<ptrdiff_t>(d) * kAttentionKeyTile + c * kPartLanes<Part>, c);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const float qd = q[r * q_stride + d];
#pragma GCC unroll 16
            for (int c = 0; c < Chains; ++c) acc[r][c] += qd * keys[c];
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < Chains; ++c)
            std::memcpy(scores + r * scores_stride + c * kPartLanes<Part>, &acc[r][c], sizeof acc[r][c]);
}

// weigh_value_parts for R rows whose keys are n_first + Step * r (row r): each value part is
// loaded once for the rows that weigh it, and each row's sums run over its keys in order.
template <typename Part, int R, int Step, int Chains, typename Cache>
[[gnu::always_inline]] inline void weigh_value_rows(float* out, ptrdiff_t out_stride, const float* probs,
                                                    ptrdiff_t probs_stride, const Cache* v, ptrdiff_t v_row_stride,
                                                    int n_first, int d0, int head_dim, NextRun& next_values) {
    Part acc[R][Chains] = {};
    // Keys 0 .. n_first - 1 for every row, then the keys only the later rows reach (Step 1), each
    // row's in order. One loop, no lambdas: split in two, or with a lambda that the level's
    // flatten did not inline, an ASan build contracted a multiply-add differently from decode's
    // and changed the bits.
    for (int j = 0; j < n_first + Step * (R - 1); ++j) {
        next_values.prefetch_line();
        Part values[Chains];
#pragma GCC unroll 16
        for (int c = 0; c < Chains; ++c) {
            load_part(values[c], v + j * v_row_stride + d0 + c * kPartLanes<Part>);
            prefetch_ahead<Part>(v + j * v_row_stride + d0 + c * kPartLanes<Part>, c);
        }
#pragma GCC unroll 4
        for (int r = Step == 0 ? 0 : std::max(0, j - n_first + 1); r < R; ++r) {  // Step 0: a constant
            const float pj = probs[r * probs_stride + j];
#pragma GCC unroll 16
            for (int c = 0; c < Chains; ++c) acc[r][c] += pj * values[c];
        }
    }
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < Chains; ++c) {
            const int first = d0 + c * kPartLanes<Part>, width = std::min(kPartLanes<Part>, head_dim - first);
            for (int l = 0; l < width; ++l) out[r * out_stride + first + l] = acc[r][c][l];
        }
}

// decode_head for R query rows (q and out rows row_stride apart), row r at position pos0 + Step
// * r: with Step 1 a sequence's consecutive rows, with Step 0 the query heads of one position
// that share a kv head. Each row gets decode_head's bits. scores, probs: R rows of
// probs_stride >= round_up(pos0 + Step * (R - 1) + 1, kTileCols) floats. next: the cache bytes
// the call after this one reads (NextRun), or none.
template <typename Part, int R, int Step, typename Cache, typename Scales>
[[gnu::always_inline]] inline void decode_rows_head(float* out, const float* q, ptrdiff_t row_stride,
                                                    const Cache* key_tiles, const Cache* v, ptrdiff_t v_row_stride,
                                                    Scales scales, int pos0, int head_dim, float scale, float* scores,
                                                    float* probs, ptrdiff_t probs_stride, NextHead next) {
    // Chains of R rows advance together while their accumulators fill half the register file
    // (AVX-512 32 registers, AVX2 16): a key tile's 4 parts at once on AVX-512, 2 of its 8 for four
    // rows on AVX2. Each score and output element keeps its own chain, so this changes no bits.
    constexpr int kAccumulators = kPartLanes<Part> == kPartLanes<Wide> ? 16 : 8;
    constexpr int kChains = std::min(kAttentionKeyTile / kPartLanes<Part>, std::max(1, kAccumulators / R));
    const auto parts = [](int columns) { return (columns + kPartLanes<Part> - 1) / kPartLanes<Part>; };
    const int n_last = pos0 + Step * (R - 1) + 1;  // keys of the last row; earlier rows ignore those past theirs
    for (int j0 = 0; j0 < n_last; j0 += kChains * kPartLanes<Part>) {
        const Cache* key_tile = key_tiles + static_cast<ptrdiff_t>(j0 / kAttentionKeyTile) * head_dim * kAttentionKeyTile +
                                j0 % kAttentionKeyTile;
        with_constant<kChains>(parts(n_last - j0), [&](auto chains) {
            score_rows<Part, R, chains()>(scores + j0, probs_stride, q, row_stride, key_tile, head_dim, next.keys);
        });
    }
    for (int r = 0; r < R; ++r) {
        const int n = pos0 + Step * r + 1;
        scale_scores(scores + r * probs_stride, scales, n);
        softmax_row(probs + r * probs_stride, scores + r * probs_stride, n, n, scale);
        scale_probs(probs + r * probs_stride, scales, n);
    }
    for (int d0 = 0; d0 < head_dim; d0 += kChains * kPartLanes<Part>) {
        with_constant<kChains>(parts(head_dim - d0), [&](auto chains) {
            weigh_value_rows<Part, R, Step, chains()>(out, row_stride, probs, probs_stride, v, v_row_stride, pos0 + 1,
                                                      d0, head_dim, next.values);
        });
    }
}

// The instruction-set levels the per-head functions are compiled for, and the one this CPU
// runs. Clang 14 lacks the levels' names: their features instead.
enum class CpuLevel { baseline, v3, v4 };

bool cpu_is_x86_64_v4() {
#if defined(__clang__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2") && cpu_has_f16c();
#else
    return __builtin_cpu_supports("x86-64-v4");
#endif
}

bool cpu_is_x86_64_v3() {
#if defined(__clang__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2") && cpu_has_f16c();
#else
    return __builtin_cpu_supports("x86-64-v3");
#endif
}

CpuLevel cpu_level() {
    static const CpuLevel level = cpu_is_x86_64_v4()   ? CpuLevel::v4
                                  : cpu_is_x86_64_v3() ? CpuLevel::v3
                                                       : CpuLevel::baseline;
    return level;
}

// f(PartOf<Part>()) compiled for one level: flatten inlines f and all it calls, so the per-head
// bodies are compiled for that level's instruction set, with its Part.
template <typename Part>
struct PartOf {
    using type = Part;
};

template <typename F>
__attribute__((target("arch=x86-64-v4"), flatten)) void run_at_v4(F& f) {
    f(PartOf<Wide>());
}

template <typename F>
__attribute__((target("arch=x86-64-v3"), flatten)) void run_at_v3(F& f) {
    f(PartOf<Half>());
}

template <typename F>
__attribute__((flatten)) void run_at_baseline(F& f) {
    f(PartOf<Quarter>());
}

template <typename F>
void run_at_cpu_level(F&& f) {
    switch (cpu_level()) {
        case CpuLevel::v4: run_at_v4(f); break;
        case CpuLevel::v3: run_at_v3(f); break;
        case CpuLevel::baseline: run_at_baseline(f); break;
    }
}

// decode_rows_head for one block shape (R rows, Step), compiled for Part's level: one flattened
// function per shape. All of a level's shapes flattened into one function made attention.cpp the
// longest compile of every checked build (525 s under clang's ASan + UBSan + fuzzing coverage,
// the long pole of the fuzz build).
template <typename Part, int R, int Step, typename... Args>
void decode_rows_at(Args... args) {
    auto decode = [&](auto part) { decode_rows_head<typename decltype(part)::type, R, Step>(args...); };
    static_assert(std::is_same_v<Part, Wide> || std::is_same_v<Part, Half>, "rows together: AVX-512 or AVX2");
    if constexpr (std::is_same_v<Part, Wide>) {
        run_at_v4(decode);
    } else {
        run_at_v3(decode);
    }
}

// Checked with if, not require(): decode calls this per layer and token.
void check_heads(int heads, int kv_heads) {
    if (kv_heads <= 0 || heads % kv_heads != 0)
        throw Error("attention: heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" +
                    std::to_string(kv_heads) + ")");
}

}  // namespace

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v, int batch,
                       int seq, int heads, int kv_heads, int head_dim) {
    check_heads(heads, kv_heads);
    const Dims dm(seq, heads, kv_heads, head_dim);
    const int group = heads / kv_heads;
#pragma omp parallel
    {
        ForwardWorkspace ws(dm);
#pragma omp for schedule(static)
        for (int bh = 0; bh < batch * heads; ++bh) {
            const int b = bh / heads, h = bh % heads;
            const ptrdiff_t q_off = static_cast<ptrdiff_t>(b) * seq * dm.q_stride + h * head_dim;
            const ptrdiff_t kv_off = static_cast<ptrdiff_t>(b) * seq * dm.kv_stride + (h / group) * head_dim;
            float* head_probs = probs != nullptr ? probs + static_cast<ptrdiff_t>(bh) * seq * seq : nullptr;
            run_at_cpu_level([&](auto part) {
                forward_head<typename decltype(part)::type>(out + q_off, head_probs, q + q_off, k + kv_off,
                                                            v + kv_off, dm, ws);
            });
        }
    }
}

size_t attention_backward_scratch_floats(int batch, int seq, int heads) {
    return static_cast<size_t>(batch) * heads * seq * seq;
}

void attention_backward(float* dq, float* dk, float* dv, float* dscores_scratch, const float* dout,
                        const float* q, const float* k, const float* v, const float* probs, int batch, int seq,
                        int heads, int kv_heads, int head_dim) {
    check_heads(heads, kv_heads);
    const Dims dm(seq, heads, kv_heads, head_dim);
    const int group = heads / kv_heads;
#pragma omp parallel
    {
        BackwardWorkspace ws(dm);
#pragma omp for schedule(static)
        for (int bkv = 0; bkv < batch * kv_heads; ++bkv) {
            const int b = bkv / kv_heads, kvh = bkv % kv_heads;
            const ptrdiff_t q_off = static_cast<ptrdiff_t>(b) * seq * dm.q_stride + kvh * group * head_dim;
            const ptrdiff_t kv_off = static_cast<ptrdiff_t>(b) * seq * dm.kv_stride + kvh * head_dim;
            const ptrdiff_t p_off = (static_cast<ptrdiff_t>(b) * heads + kvh * group) * seq * seq;
            run_at_cpu_level([&](auto part) {
                backward_kv_head<typename decltype(part)::type>(dq + q_off, dk + kv_off, dv + kv_off,
                                                                dscores_scratch + p_off, dout + q_off, q + q_off,
                                                                k + kv_off, v + kv_off, probs + p_off, group, dm, ws);
            });
        }
    }
}

static_assert(kAttentionKeyTile % kTileCols == 0, "decode loads whole vectors of a key tile");
int attention_key_stride(int max_seq) { return round_up(max_seq, kAttentionKeyTile); }

int attention_value_stride(int max_seq, int head_dim) {
    const int past_row_end = round_up(head_dim, kTileCols) - head_dim;
    return max_seq + (past_row_end + head_dim - 1) / head_dim;
}

namespace {

// A cache layer's keys or values as the per-head functions read them: fp32 and fp16 caches are
// their values (no scales), an int8 cache its codes and each position's scale.
template <typename Code>
struct CacheView {
    const Code* codes;
    const float* scales;  // (kv_heads, stride), int8 only
    // Kv head h's entries, per_head codes each.
    const Code* head(ptrdiff_t h, ptrdiff_t per_head) const { return codes + h * per_head; }
};
CacheView<float> view_of(const float* values) { return {values, nullptr}; }
CacheView<Float16> view_of(const Float16* values) { return {values, nullptr}; }
CacheView<int8_t> view_of(Int8Codes codes) { return {codes.codes, codes.scales}; }

// Kv head h's scales: PositionScales of an int8 cache, NoScales of a float one.
template <typename Code>
auto head_scales(CacheView<Code> keys, int key_stride, CacheView<Code> values, int value_stride, ptrdiff_t h) {
    if constexpr (std::is_same_v<Code, int8_t>) {
        return PositionScales{keys.scales + h * key_stride, values.scales + h * value_stride};
    } else {
        return NoScales{};
    }
}

// Keys and values stored entry by entry: fp32 as they are, fp16 rounded.
template <typename Cache>
[[gnu::always_inline]] inline void store_keys_and_values_as(Cache* keys, int key_stride, Cache* values,
                                                            int value_stride, const float* k, const float* v,
                                                            int first_pos, int count, int kv_heads, int head_dim,
                                                            int head_begin, int head_end) {
    const int kv_dim = kv_heads * head_dim;
    for (int t = 0; t < count; ++t) {
        const ptrdiff_t pos = first_pos + t;
        for (int h = head_begin; h < head_end; ++h) {
            const float* k_head = k + static_cast<ptrdiff_t>(t) * kv_dim + h * head_dim;
            const float* v_head = v + static_cast<ptrdiff_t>(t) * kv_dim + h * head_dim;
            Cache* v_row = values + (static_cast<ptrdiff_t>(h) * value_stride + pos) * head_dim;
            Cache* key_tiles = keys + static_cast<ptrdiff_t>(h) * head_dim * key_stride;
            const ptrdiff_t tile = (pos / kAttentionKeyTile) * head_dim * kAttentionKeyTile + pos % kAttentionKeyTile;
            for (int d = 0; d < head_dim; ++d) {
                key_tiles[tile + d * kAttentionKeyTile] = static_cast<Cache>(k_head[d]);
                v_row[d] = static_cast<Cache>(v_head[d]);
            }
        }
    }
}

// Per-thread buffers of decode: scores and probabilities of one head, and the widened keys and
// values of a narrow cache where it cannot be read in place.
struct DecodeBuffers {
    std::vector<float> scores, probs;  // (round_up(pos + 1, kTileCols))
    std::vector<float> keys, values;   // fp16 and int8 caches at the baseline level only
};

void widen_codes(const Float16* in, float* out, size_t count) { widen_f16(in, out, count); }
void widen_codes(const int8_t* in, float* out, size_t count) {
    for (size_t i = 0; i < count; ++i) out[i] = in[i];
}

// Decode of one query head over its kv head's cache (key_tiles and values as attention.h lays
// them out; scales as decode_head takes them). An fp32 cache is read in
// place at every level; a narrow one (fp16, int8) at the x86-64-v4 and v3 levels by decode's own
// arithmetic (a part widened by one or two instructions), and at the baseline level widened
// into buffers first (the cache is still read at its own bytes).
template <typename Code, typename Scales>
void decode_cached_head(float* out, const float* q, const Code* key_tiles, const Code* values, Scales scales, int pos,
                        int head_dim, float scale, DecodeBuffers& buffers) {
    constexpr bool kFloat = std::is_same_v<Code, float>;
    if (kFloat || cpu_level() != CpuLevel::baseline) {
        run_at_cpu_level([&](auto part) {
            using Part = typename decltype(part)::type;
            if constexpr (kFloat || !std::is_same_v<Part, Quarter>)
                decode_head<Part>(out, q, key_tiles, values, head_dim, scales, pos, head_dim, scale,
                                  buffers.scores.data(), buffers.probs.data());
        });
        return;
    }
    if constexpr (!kFloat) {
        // The whole tiles of keys 0..pos, and pos + 1 rows of values; the tiles read kTileCols
        // values past them, zeros here: the cache past those rows may be another kv head's, which
        // another thread is writing (TSan found the read on a CPU without AVX-512).
        buffers.keys.resize(static_cast<size_t>(round_up(pos + 1, kAttentionKeyTile)) * head_dim);
        widen_codes(key_tiles, buffers.keys.data(), buffers.keys.size());
        const size_t value_count = static_cast<size_t>(pos + 1) * head_dim;
        buffers.values.resize(value_count + kTileCols);
        widen_codes(values, buffers.values.data(), value_count);
        std::fill(buffers.values.begin() + static_cast<ptrdiff_t>(value_count), buffers.values.end(), 0.0f);
        decode_cached_head<float>(out, q, buffers.keys.data(), buffers.values.data(), scales, pos, head_dim, scale,
                                  buffers);
    }
}

// Decode of one position, one query head at a time: the baseline level, and a chunk's rows on
// AVX2 (attention_decode_rows_from).
template <typename Code>
void decode_head_by_head(float* out, const float* q, CacheView<Code> keys, int key_stride, CacheView<Code> values,
                         int value_stride, int pos, int heads, int kv_heads, int head_dim, int head_begin,
                         int head_end) {
    const int group = heads / kv_heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const size_t padded = static_cast<size_t>(round_up(pos + 1, kTileCols));
    DecodeBuffers buffers;  // small and transient
    buffers.scores.resize(padded);
    buffers.probs.resize(padded);
    for (int h = head_begin; h < head_end; ++h) {
        const ptrdiff_t kv_head = h / group;
        decode_cached_head(out + static_cast<ptrdiff_t>(h) * head_dim, q + static_cast<ptrdiff_t>(h) * head_dim,
                           keys.head(kv_head, static_cast<ptrdiff_t>(head_dim) * key_stride),
                           values.head(kv_head, static_cast<ptrdiff_t>(value_stride) * head_dim),
                           head_scales(keys, key_stride, values, value_stride, kv_head), pos, head_dim, scale,
                           buffers);
    }
}

// Queries go four at a time, sharing each load (and widening) of a key or value, with their
// accumulators in registers (decode_rows_head): on AVX-512 a chunk's rows of one head or one
// position's query heads that share a kv head, on AVX2 the latter. Elsewhere one by one.
constexpr int kDecodeRowBlock = 4;

template <typename Code>
void attention_decode_rows_from(float* out, const float* q, int row_stride, CacheView<Code> keys, int key_stride,
                                CacheView<Code> values, int value_stride, int first_pos, int rows, int heads,
                                int kv_heads, int head_dim, int head_begin, int head_end) {
    check_heads(heads, kv_heads);
    // AVX2 takes a position's query heads together, a chunk's rows one by one: four rows of a
    // chunk kept their accumulators on the stack there and ran slower than one.
    if (cpu_level() == CpuLevel::baseline || (cpu_level() == CpuLevel::v3 && rows > 1)) {
        for (int i = 0; i < rows; ++i)
            decode_head_by_head(out + static_cast<ptrdiff_t>(i) * row_stride, q + static_cast<ptrdiff_t>(i) * row_stride,
                                keys, key_stride, values, value_stride, first_pos + i, heads, kv_heads, head_dim,
                                head_begin, head_end);
        return;
    }
    const int group = heads / kv_heads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    const ptrdiff_t probs_stride = round_up(first_pos + rows, kTileCols);
    // (kDecodeRowBlock, probs_stride) each, grown once per thread rather than allocated per call
    // (a batch's decode step calls this for every sequence, layer and share of heads).
    thread_local std::vector<float> scores, probs;
    const size_t block_floats = static_cast<size_t>(kDecodeRowBlock * probs_stride);
    if (scores.size() < block_floats) {
        scores.resize(block_floats);
        probs.resize(block_floats);
    }
    const auto key_tiles = [&](ptrdiff_t kv_head) { return keys.head(kv_head, static_cast<ptrdiff_t>(head_dim) * key_stride); };
    const auto head_values = [&](ptrdiff_t kv_head) {
        return values.head(kv_head, static_cast<ptrdiff_t>(value_stride) * head_dim);
    };
    const auto scales = [&](ptrdiff_t kv_head) { return head_scales(keys, key_stride, values, value_stride, kv_head); };
    // What a position's decode of kv head kv_head reads: its key tiles and its value rows.
    const auto runs_of = [&](ptrdiff_t kv_head) {
        const auto bytes = [](const Code* p) { return reinterpret_cast<const char*>(p); };
        const size_t key_bytes = static_cast<size_t>(round_up(first_pos + 1, kAttentionKeyTile)) * head_dim * sizeof(Code);
        const size_t value_bytes = static_cast<size_t>(first_pos + 1) * head_dim * sizeof(Code);
        const char* keys_at = bytes(key_tiles(kv_head));
        const char* values_at = bytes(head_values(kv_head));
        return NextHead{{keys_at, keys_at + key_bytes}, {values_at, values_at + value_bytes}};
    };
    auto by_blocks = [&](auto part) {
        using Part = typename decltype(part)::type;
        if (rows == 1) {
            for (int h = head_begin; h < head_end;) {
                const int kv_head = h / group;
                const int block = std::min({kDecodeRowBlock, head_end - h, (kv_head + 1) * group - h});
                const ptrdiff_t offset = static_cast<ptrdiff_t>(h) * head_dim;
                // The next kv head's reads overlap this one's arithmetic: 8 streams at 512
                // positions decoded 4-6% faster from an int8 cache, 1-2% from f16 (docs/results.md,
                // "An int8 KV cache against context"). A call's last kv head has none to fetch.
                const bool next_head = h + block < head_end && (h + block) / group != kv_head;
                const NextHead next = next_head ? runs_of(kv_head + 1) : NextHead{};
                with_constant<kDecodeRowBlock>(block, [&](auto heads_together) {
                    decode_rows_at<Part, heads_together(), 0>(
                        out + offset, q + offset, static_cast<ptrdiff_t>(head_dim), key_tiles(kv_head),
                        head_values(kv_head), static_cast<ptrdiff_t>(head_dim), scales(kv_head), first_pos, head_dim,
                        scale, scores.data(), probs.data(), probs_stride, next);
                });
                h += block;
            }
            return;
        }
        // A chunk's rows together: AVX-512 only (AVX2 returned above).
        if constexpr (std::is_same_v<Part, Wide>) {
            for (int h = head_begin; h < head_end; ++h) {
                const ptrdiff_t kv_head = h / group;
                for (int i = 0; i < rows; i += kDecodeRowBlock) {
                    const ptrdiff_t offset = static_cast<ptrdiff_t>(i) * row_stride + static_cast<ptrdiff_t>(h) * head_dim;
                    with_constant<kDecodeRowBlock>(rows - i, [&](auto block) {
                        decode_rows_at<Part, block(), 1>(out + offset, q + offset, static_cast<ptrdiff_t>(row_stride),
                                                         key_tiles(kv_head), head_values(kv_head),
                                                         static_cast<ptrdiff_t>(head_dim), scales(kv_head),
                                                         first_pos + i, head_dim, scale, scores.data(), probs.data(),
                                                         probs_stride, NextHead{});
                    });
                }
            }
        }
    };
    if (cpu_level() == CpuLevel::v4) {
        by_blocks(PartOf<Wide>());
    } else {
        by_blocks(PartOf<Half>());
    }
}

}  // namespace

void store_keys_and_values(float* keys, int key_stride, float* values, int value_stride, const float* k,
                           const float* v, int first_pos, int count, int kv_heads, int head_dim, int head_begin,
                           int head_end) {
    store_keys_and_values_as(keys, key_stride, values, value_stride, k, v, first_pos, count, kv_heads, head_dim,
                             head_begin, head_end);
}

// Cloned: the x86-64-v3/v4 builds convert with F16C instructions, the baseline one in software.
DQT_TARGET_CLONES
void store_keys_and_values(Float16* keys, int key_stride, Float16* values, int value_stride, const float* k,
                           const float* v, int first_pos, int count, int kv_heads, int head_dim, int head_begin,
                           int head_end) {
    store_keys_and_values_as(keys, key_stride, values, value_stride, k, v, first_pos, count, kv_heads, head_dim,
                             head_begin, head_end);
}

void store_keys_and_values(Int8Codes keys, int key_stride, Int8Codes values, int value_stride, const float* k,
                           const float* v, int first_pos, int count, int kv_heads, int head_dim, int head_begin,
                           int head_end) {
    const int kv_dim = kv_heads * head_dim;
    // One key, before it is spread over its tile; kept per thread, as this runs once a layer a step.
    thread_local std::vector<int8_t> key_codes;
    key_codes.resize(static_cast<size_t>(head_dim));
    for (int t = 0; t < count; ++t) {
        const ptrdiff_t pos = first_pos + t;
        for (int h = head_begin; h < head_end; ++h) {
            const float* k_head = k + static_cast<ptrdiff_t>(t) * kv_dim + h * head_dim;
            const float* v_head = v + static_cast<ptrdiff_t>(t) * kv_dim + h * head_dim;
            // quantize_row_int8 returns s with x ~ code / s; the cache keeps 1 / s.
            keys.scales[static_cast<ptrdiff_t>(h) * key_stride + pos] =
                1.0f / quantize_row_int8(k_head, head_dim, key_codes.data(), nullptr);
            int8_t* key_tiles = keys.codes + static_cast<ptrdiff_t>(h) * head_dim * key_stride;
            const ptrdiff_t tile = (pos / kAttentionKeyTile) * head_dim * kAttentionKeyTile + pos % kAttentionKeyTile;
            for (int d = 0; d < head_dim; ++d) key_tiles[tile + d * kAttentionKeyTile] = key_codes[static_cast<size_t>(d)];
            int8_t* v_row = values.codes + (static_cast<ptrdiff_t>(h) * value_stride + pos) * head_dim;
            values.scales[static_cast<ptrdiff_t>(h) * value_stride + pos] =
                1.0f / quantize_row_int8(v_head, head_dim, v_row, nullptr);
        }
    }
}

void attention_decode(float* out, const float* q, const float* keys, int key_stride, const float* values,
                      int value_stride, int pos, int heads, int kv_heads, int head_dim, int head_begin, int head_end) {
    attention_decode_rows_from(out, q, 0, view_of(keys), key_stride, view_of(values), value_stride, pos, 1, heads,
                               kv_heads, head_dim, head_begin, head_end);
}

void attention_decode(float* out, const float* q, const Float16* keys, int key_stride, const Float16* values,
                      int value_stride, int pos, int heads, int kv_heads, int head_dim, int head_begin, int head_end) {
    attention_decode_rows_from(out, q, 0, view_of(keys), key_stride, view_of(values), value_stride, pos, 1, heads,
                               kv_heads, head_dim, head_begin, head_end);
}

void attention_decode(float* out, const float* q, Int8Codes keys, int key_stride, Int8Codes values, int value_stride,
                      int pos, int heads, int kv_heads, int head_dim, int head_begin, int head_end) {
    attention_decode_rows_from(out, q, 0, view_of(keys), key_stride, view_of(values), value_stride, pos, 1, heads,
                               kv_heads, head_dim, head_begin, head_end);
}

DQT_TARGET_CLONES
void attention_decode_rows(float* out, const float* q, int row_stride, const float* keys, int key_stride,
                           const float* values, int value_stride, int first_pos, int rows, int heads, int kv_heads,
                           int head_dim, int head_begin, int head_end) {
    attention_decode_rows_from(out, q, row_stride, view_of(keys), key_stride, view_of(values), value_stride,
                               first_pos, rows, heads, kv_heads, head_dim, head_begin, head_end);
}

void attention_decode_rows(float* out, const float* q, int row_stride, const Float16* keys, int key_stride,
                           const Float16* values, int value_stride, int first_pos, int rows, int heads, int kv_heads,
                           int head_dim, int head_begin, int head_end) {
    attention_decode_rows_from(out, q, row_stride, view_of(keys), key_stride, view_of(values), value_stride,
                               first_pos, rows, heads, kv_heads, head_dim, head_begin, head_end);
}

void attention_decode_rows(float* out, const float* q, int row_stride, Int8Codes keys, int key_stride,
                           Int8Codes values, int value_stride, int first_pos, int rows, int heads, int kv_heads,
                           int head_dim, int head_begin, int head_end) {
    attention_decode_rows_from(out, q, row_stride, view_of(keys), key_stride, view_of(values), value_stride,
                               first_pos, rows, heads, kv_heads, head_dim, head_begin, head_end);
}

}  // namespace dqt
