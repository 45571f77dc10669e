// Tile kernels of ternary_matmul; see kernels/ternary_tiles.h. Each instruction-set path is
// compiled with a target attribute, so the binary needs no -march flag and picks at run time.
#include "kernels/ternary_tiles.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/lane_sum.h"
#include "kernels/ternary_matmul.h"
#include "kernels/vnni.h"

namespace dqt {

namespace {

// ---- portable scalar path ----------------------------------------------------------------

void tile_scalar(const uint8_t* const* w_rows, int w_count, const int8_t* const* a_rows, int a_count, int blocks,
                 int32_t* dots) {
    for (int i = 0; i < w_count; ++i) {
        for (int j = 0; j < a_count; ++j) {
            int32_t sum = 0;
            for (int b = 0; b < blocks; ++b) {
                const uint8_t* w = w_rows[i] + static_cast<size_t>(b) * kTernaryBlockBytes;
                const int8_t* a = a_rows[j] + static_cast<size_t>(b) * kTernaryBlock;
                for (int half = 0; half < 2; ++half)
                    for (int n = 0; n < 4; ++n)
                        for (int m = 0; m < 32; ++m)
                            sum += ((w[32 * half + m] >> (2 * n)) & 3) * a[128 * half + 32 * n + m];
            }
            dots[i * kTileDotsStride + j] = sum;
        }
    }
}

// ---- AVX-512 VNNI: dpbusd (u8 x s8, four products per s32 lane) ---------------------------
//
// One 64-byte load holds a whole block's codes: lanes 0-31 from half 0, 32-63 from half 1, so
// shift n pairs with activations [32n, 32n + 32) and [128 + 32n, 128 + 32n + 32).

template <int WR, int AR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_avx512(const uint8_t* const* w_rows,
                                                                        const int8_t* const* a_rows, int blocks,
                                                                        int32_t* dots) {
    const __m512i low2 = _mm512_set1_epi8(3);
    __m512i acc[WR][AR];
    for (int i = 0; i < WR; ++i)
        for (int j = 0; j < AR; ++j) acc[i][j] = _mm512_setzero_si512();
    for (int b = 0; b < blocks; ++b) {
        __m512i packed[WR];
        for (int i = 0; i < WR; ++i)
            packed[i] = _mm512_loadu_si512(w_rows[i] + static_cast<size_t>(b) * kTernaryBlockBytes);
        for (int n = 0; n < 4; ++n) {
            __m512i a[AR];
            for (int j = 0; j < AR; ++j) {
                const int8_t* base = a_rows[j] + static_cast<size_t>(b) * kTernaryBlock + 32 * n;
                // Low half [32n, 32n + 32), high half [128 + 32n, ...) (a masked broadcast: GCC 12's
                // _mm512_inserti64x4 trips its own uninitialised-value warning).
                a[j] = _mm512_mask_broadcast_i64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base))), 0xF0,
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + 128)));
            }
            for (int i = 0; i < WR; ++i) {
                const __m512i codes = _mm512_and_si512(_mm512_srli_epi16(packed[i], 2 * n), low2);
                for (int j = 0; j < AR; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], codes, a[j]);
            }
        }
    }
    // Lanes summed through memory: GCC 12's _mm512_reduce_add_epi32 trips its own
    // uninitialised-value warnings, and this runs once per tile.
    for (int i = 0; i < WR; ++i) {
        for (int j = 0; j < AR; ++j) {
            alignas(64) int32_t lanes[16];
            _mm512_store_si512(lanes, acc[i][j]);
            int32_t sum = 0;
            for (int l = 0; l < 16; ++l) sum += lanes[l];
            dots[i * kTileDotsStride + j] = sum;
        }
    }
}

// ---- AVX-512 VNNI, decode and small batches: 16 / R weight rows x R activation rows ------
// GCC 12's unpack and convert intrinsics trip its own uninitialised-value warning (an
// undefined merge source inside the intrinsic).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// A group of `count` activation rows rearranged so that everything one block's shift n pairs
// with is contiguous, row after row: out[((4b + n) * count + j) * 64 + 32h + m] =
// a_j[256b + 128h + 32n + m]. One pointer then reaches every row's operand at a constant
// offset (with a pointer per row, 8 rows ran out of general registers and spilled them).
// Rows from `live` on are padding, zeros.
void interleave_group_for_codes(const int8_t* a, size_t a_stride, int count, int live, int blocks, int8_t* out) {
    for (int b = 0; b < blocks; ++b)
        for (int n = 0; n < 4; ++n)
            for (int j = 0; j < count; ++j)
                for (int h = 0; h < 2; ++h) {
                    int8_t* to = out + ((4 * b + n) * count + j) * 64 + 32 * h;
                    if (j < live)
                        std::memcpy(to, a + static_cast<size_t>(j) * a_stride + 256 * b + 128 * h + 32 * n, 32);
                    else
                        std::memset(to, 0, 32);
                }
}

// How far ahead of its loads a decode tile prefetches its weight stream, and into L2 (hint T1),
// not L1. On a Zen 4 (build/bench_decode_stream), the masked loop below read 8-10 GB/s from
// memory with no prefetch or with T0 prefetches at 1-32 KiB, and 18.5-21 GB/s with T1 at 8-32
// KiB, of a 26-28 GB/s read limit; why a loop that computes faster reads slower without it is
// not known (this VM exposes no performance counters). bench_ternary_batch, one row: 12.9-13.9
// GB/s before (shifted codes, T0 at 4 KiB), 15.8 with T1 at 8 KiB, 17.5 at 16 KiB; `bench
// generate` on the 2.09B file decoded 3-6% faster at 8 KiB than at 16 (docs/results.md). A
// prefetch past the matrix's end does not fault.
constexpr size_t kStreamPrefetchBytes = 8192;

// Sixteen vectors of 16 int32 lanes -> one vector whose lane i is the sum of vector i's lanes.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline __m512i fold16(const __m512i (&v)[16]) {
    __m512i pairs[8], quads[4], octets[2];
    // Within each 128-bit lane: (x0 + x2, y0 + y2, x1 + x3, y1 + y3) for vectors x, y.
    for (int i = 0; i < 8; ++i)
        pairs[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                    _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    // Each 128-bit lane now holds one partial sum of each of four vectors, in order.
    for (int i = 0; i < 4; ++i)
        quads[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(pairs[2 * i], pairs[2 * i + 1]),
                                    _mm512_unpackhi_epi64(pairs[2 * i], pairs[2 * i + 1]));
    // Add the 128-bit lanes pairwise: lanes (0 + 1, 2 + 3) of two quads side by side.
    for (int i = 0; i < 2; ++i)
        octets[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_i32x4(quads[2 * i], quads[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(octets[0], octets[1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(octets[0], octets[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Weight rows [row_begin, row_end) against a group of R activation rows interleaved as
// interleave_group_for_codes writes them, 16 / R weight
// rows at a time: each weight block is loaded and its codes unpacked once for all R rows, and
// the tile's 16 dots (lane i * R + j: weight row i, activation row j; unused ones stay zero)
// fold into one vector.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void small_batch_tiles(
    const uint8_t* packed, size_t row_bytes, int row_begin, int row_end, const int8_t* a,
    const int32_t* a_sums, const float* factors, int live, int blocks, float* out, size_t out_stride) {
    constexpr int kRows = 16 / R;  // weight rows a tile
    const __m512i low2 = _mm512_set1_epi8(3);
    alignas(64) int32_t lane_sums[16] = {};
    alignas(64) float lane_factors[16] = {};
    for (int k = 0; k < kRows * R; ++k) {
        if (k % R >= live) continue;  // padding rows: their dots are dropped
        lane_sums[k] = a_sums[k % R];
        lane_factors[k] = factors[k % R];
    }
    const __m512i sums = _mm512_load_si512(lane_sums);
    const __m512 scale = _mm512_load_ps(lane_factors);
    for (int first = row_begin; first < row_end; first += kRows) {
        const int count = std::min(kRows, row_end - first);
        const uint8_t* rows[kRows];
        for (int i = 0; i < kRows; ++i)
            rows[i] = packed + static_cast<size_t>(first + std::min(i, count - 1)) * row_bytes;
        // The loops below are unrolled whole (pragmas), so that accumulators and held operands
        // stay in registers: 32 of them hold 16 accumulators, the mask, a code vector and the rest.
        __m512i acc[16];
        for (int k = 0; k < 16; ++k) acc[k] = _mm512_setzero_si512();
        if constexpr (R == 1) {
            // The memory-bound shape (decode, and the groups of one next_row_group makes):
            // each weight row read whole, front to back, so the tile's bytes stream in address
            // order (a pass over the tile block by block, 16 rows interleaved, read 1.65x slower
            // with or without software prefetches). The stream is prefetched
            // kStreamPrefetchBytes ahead into L2: the hardware prefetcher alone kept one thread
            // at 14 GB/s of a 27 GB/s read limit on a Zen 5 (bench_ternary_batch;
            // docs/results.md). Four partial sums per dot, one per code position, keep four
            // independent dpbusd chains in flight. Each position's codes are masked in place,
            // not shifted down: part[n] sums (q + 1) * 4^n * a, exactly divisible by 4^n, and is
            // shifted back once per row. Four shifts a block fewer: from cache, on a Zen 4
            // (512-bit operations in two halves), the loop reads 24-27 GB/s shifted and 36-40
            // masked (build/bench_decode_stream).
            const __m512i position_mask[4] = {low2, _mm512_set1_epi8(0x0C), _mm512_set1_epi8(0x30),
                                              _mm512_set1_epi8(static_cast<char>(0xC0))};
#pragma GCC unroll 16
            for (int i = 0; i < kRows; ++i) {
                __m512i part[4];
#pragma GCC unroll 4
                for (int n = 0; n < 4; ++n) part[n] = _mm512_setzero_si512();
                for (int b = 0; b < blocks; ++b) {
                    _mm_prefetch(reinterpret_cast<const char*>(rows[i] + static_cast<size_t>(b) * kTernaryBlockBytes +
                                                               kStreamPrefetchBytes),
                                 _MM_HINT_T1);
                    const __m512i w = _mm512_loadu_si512(rows[i] + static_cast<size_t>(b) * kTernaryBlockBytes);
                    const int8_t* block_a = a + static_cast<size_t>(b) * kTernaryBlock;
#pragma GCC unroll 4
                    for (int n = 0; n < 4; ++n)
                        part[n] = dpbusd(part[n], _mm512_and_si512(w, position_mask[n]),
                                         _mm512_load_si512(block_a + n * 64));
                }
                acc[i] = _mm512_add_epi32(_mm512_add_epi32(part[0], _mm512_srai_epi32(part[1], 2)),
                                          _mm512_add_epi32(_mm512_srai_epi32(part[2], 4), _mm512_srai_epi32(part[3], 6)));
            }
        } else {
            // Compute-bound shapes (groups of 3 and 4): the tile's few weight rows pass block by
            // block; each shift's R activation vectors are held while those rows' codes for it
            // pass. Each block prefetches the same line of the row 16 rows on (without, 8 rows
            // ran 1.08x slower: a tile of short rows is a few hundred bytes of a page, where the
            // hardware prefetcher starts over), into L2 as the decode stream is: on a Zen 4,
            // bench_ternary_batch's 2, 3 and 8 rows ran 94-104, 134-150 and 165-174 G MAC/s with
            // T1 against 54-85, 76-128 and 116-165 with T0.
            for (int b = 0; b < blocks; ++b) {
                const int8_t* block_a = a + static_cast<size_t>(b) * R * kTernaryBlock;
                const size_t w_offset = static_cast<size_t>(b) * kTernaryBlockBytes;
                for (int i = 0; i < kRows; ++i)
                    _mm_prefetch(reinterpret_cast<const char*>(rows[i] + w_offset + 16 * row_bytes), _MM_HINT_T1);
#pragma GCC unroll 4
                for (int n = 0; n < 4; ++n) {
                    __m512i av[R];
#pragma GCC unroll 4
                    for (int j = 0; j < R; ++j) av[j] = _mm512_load_si512(block_a + (n * R + j) * 64);
#pragma GCC unroll 5
                    for (int i = 0; i < kRows; ++i) {
                        const __m512i codes =
                            _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(rows[i] + w_offset), 2 * n), low2);
#pragma GCC unroll 4
                        for (int j = 0; j < R; ++j) acc[i * R + j] = dpbusd(acc[i * R + j], codes, av[j]);
                    }
                }
            }
        }
        alignas(64) float values[16];
        _mm512_store_ps(values, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_sub_epi32(fold16(acc), sums))));
        for (int i = 0; i < count; ++i)
            for (int j = 0; j < live; ++j) out[static_cast<size_t>(j) * out_stride + first + i] = values[i * R + j];
    }
}

// The next group of activation rows: `live` of the `remaining` rows, run by the kernel for
// `rows` (1, 3 or 4; the rest padding). Measured with bench_ternary_batch (AMD Zen 5, the 154M
// model's layers from memory): a group reads its weight chunk once and groups after the first
// find it in L2; groups of 3 and 4 run at 61-65% of the VNNI limit from memory, one of 8 at
// 44% (its 2-row tiles stall on weight loads), so 8 rows run as 4 + 4 (1.56x faster) and 6 as
// 3 + 3; a group of 2 read 11-12 GB/s where one row reads 20 and a group of 3 17, so 2 rows run
// as a group of 3 with one row of zeros (1.56x faster; docs/serve.md, "Groups of four rows").
struct RowGroup {
    int first, rows, live;
};
RowGroup next_row_group(int first, int remaining) {
    if (remaining == 6 || remaining == 3) return {first, 3, 3};
    if (remaining == 2) return {first, 3, 2};
    return remaining >= 4 ? RowGroup{first, 4, 4} : RowGroup{first, 1, 1};
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void ternary_small_batch_rows_avx512_vnni(
    const uint8_t* packed, size_t row_bytes, int row_begin, int row_end, const int8_t* a, size_t a_stride,
    int a_rows, const int32_t* a_sums, const float* factors, int blocks, float* out, size_t out_stride) {
    if (a_rows > kSmallBatchMaxRows) throw Error("ternary small batch: more activation rows than kSmallBatchMaxRows");
    // A decode lane sums one dpbusd a block of codes up to 2 * 4^3 times |a| <= 128, four
    // products each: 65,536 a block, so int32 holds 32,767 blocks (8.4M columns).
    if (blocks > 32767) throw Error("ternary small batch: rows longer than 32,767 blocks of 256 weights");
    RowGroup groups[kSmallBatchMaxRows];
    int group_count = 0;
    for (int first = 0; first < a_rows; first += groups[group_count++].live)
        groups[group_count] = next_row_group(first, a_rows - first);
    const size_t row_interleaved_bytes = static_cast<size_t>(blocks) * kTernaryBlock;
    // (a_rows, blocks * 256) in those groups, reused across calls; 64-byte aligned, as each load
    // must be to stay within one cache line (a std::vector's 16-byte alignment made 8 rows 1.35x
    // slower).
    thread_local Array<int8_t> interleaved;
    const size_t padded_rows = static_cast<size_t>(a_rows) + 1;  // a group of 3 may hold one row of padding
    if (interleaved.size() < padded_rows * row_interleaved_bytes)
        interleaved = Array<int8_t>(MemCategory::scratch, padded_rows * row_interleaved_bytes);
    for (int g = 0; g < group_count; ++g)
        interleave_group_for_codes(a + static_cast<size_t>(groups[g].first) * a_stride, a_stride, groups[g].rows,
                                   groups[g].live, blocks, interleaved.data() + groups[g].first * row_interleaved_bytes);
    // Chunks of weight rows small enough to stay in L1/L2 while every group of activation rows passes.
    for (int chunk = row_begin; chunk < row_end; chunk += kSmallBatchChunkRows) {
        const int chunk_end = std::min(row_end, chunk + kSmallBatchChunkRows);
        for (int g = 0; g < group_count; ++g) {
            const RowGroup& group = groups[g];
            const int8_t* group_a = interleaved.data() + group.first * row_interleaved_bytes;
            const auto run = [&](auto tiles) {
                tiles(packed, row_bytes, chunk, chunk_end, group_a, a_sums + group.first, factors + group.first,
                      group.live, blocks, out + group.first * out_stride, out_stride);
            };
            switch (group.rows) {
                case 1: run(small_batch_tiles<1>); break;
                case 3: run(small_batch_tiles<3>); break;
                default: run(small_batch_tiles<4>); break;
            }
        }
    }
}
#pragma GCC diagnostic pop

// ---- AVX2, decode and small batches: each weight row streamed whole ------------------------
//
// The memory-bound shape on a CPU without AVX-512 (an AMD Zen 3, a Zen 4 whose VM hides AVX-512):
// as the AVX-512 decode tile, each row is read front to back with its stream prefetched
// kStreamPrefetchBytes ahead into L2 (prompts: ternary_prompt_rows_avx2, below). Each 32-byte
// half of a block is unpacked into its four code vectors once for a group of up to four
// activation rows; a batch of more rows passes eight weight rows at a time again, group by
// group, from L1 or L2. Products: vpmaddubsw (u8 x s8 -> s16 pairs) of (q + 1) in {0, 1, 2} and
// s8 activations, at most 2 * 2 * 128 = 512 a s16 lane, so 2048 over a half's four, then a
// madd with ones to s32.

// 32 activations at `at`.
__attribute__((target("avx2"), always_inline)) inline __m256i activations(const int8_t* at) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
}

// lanes[i] sums to the row's dot with activation row i (sum of (q + 1) * a_i), for R rows
// a_stride apart.
template <int R>
__attribute__((target("avx2"), always_inline)) inline void row_group_lanes_avx2(const uint8_t* row, const int8_t* a,
                                                                                size_t a_stride, int blocks,
                                                                                bool prefetch, __m256i* lanes) {
    const __m256i low2 = _mm256_set1_epi8(3);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256i acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_si256();
    for (int b = 0; b < blocks; ++b) {
        const uint8_t* block = row + static_cast<size_t>(b) * kTernaryBlockBytes;
        if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(block + kStreamPrefetchBytes), _MM_HINT_T1);
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32 * half));
            __m256i codes[4];
#pragma GCC unroll 4
            for (int n = 0; n < 4; ++n) codes[n] = _mm256_and_si256(_mm256_srli_epi16(w, 2 * n), low2);
            const size_t offset = static_cast<size_t>(b) * kTernaryBlock + 128 * half;
#pragma GCC unroll 4
            for (int i = 0; i < R; ++i) {
                const int8_t* half_a = a + i * a_stride + offset;
                __m256i sum16 = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int n = 0; n < 4; ++n)
                    sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(codes[n], activations(half_a + 32 * n)));
                acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(sum16, ones16));
            }
        }
    }
    for (int i = 0; i < R; ++i) lanes[i] = acc[i];
}

// One activation row (a decode), where the loop's arithmetic, not memory, held a thread back
// (bench_decode_stream --avx2: 15-21 GB/s from cache against 30 GB/s from memory on a Zen 4):
// the codes masked in place, one shift a half-block rather than three. Codes at bits 0-1 of a
// byte, and at bits 4-5 shifted down by 4, multiply as they are ("units"); those at bits 2-3
// and 6-7 come out times 4 ("fours"). A half-block adds at most 2 x 2 x 2 x 128 = 1,024 to a
// unit s16 lane and 4,096 to a four lane, so the s16 sums are widened once per
// kLoneRowWidenBlocks blocks (24,576 a lane), the units by a madd with 4 and the fours with 1
// into one s32 sum: 4 x the dot, every lane a multiple of 4 (at most 32,768 a block a lane).
constexpr int kLoneRowWidenBlocks = 3;

// Lanes summing to 4 x the row's dot with `a`.
__attribute__((target("avx2"), always_inline)) inline __m256i row_lanes_avx2(const uint8_t* row, const int8_t* a,
                                                                            int blocks, bool prefetch) {
    const __m256i low2 = _mm256_set1_epi8(3), next2 = _mm256_set1_epi8(0x0C);
    const __m256i by4 = _mm256_set1_epi16(4), by1 = _mm256_set1_epi16(1);
    __m256i lanes = _mm256_setzero_si256();  // s32
    for (int first = 0; first < blocks; first += kLoneRowWidenBlocks) {
        __m256i unit16 = _mm256_setzero_si256(), four16 = _mm256_setzero_si256();
        const int last = std::min(blocks, first + kLoneRowWidenBlocks);
        for (int b = first; b < last; ++b) {
            const uint8_t* block = row + static_cast<size_t>(b) * kTernaryBlockBytes;
            if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(block + kStreamPrefetchBytes), _MM_HINT_T1);
#pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {
                const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32 * half));
                const __m256i w4 = _mm256_srli_epi16(w, 4);  // bits 4-7 of each byte at 0-3
                const int8_t* half_a = a + static_cast<size_t>(b) * kTernaryBlock + 128 * half;
                unit16 = _mm256_add_epi16(unit16, _mm256_maddubs_epi16(_mm256_and_si256(w, low2), activations(half_a)));
                unit16 = _mm256_add_epi16(unit16,
                                          _mm256_maddubs_epi16(_mm256_and_si256(w4, low2), activations(half_a + 64)));
                four16 = _mm256_add_epi16(four16,
                                          _mm256_maddubs_epi16(_mm256_and_si256(w, next2), activations(half_a + 32)));
                four16 = _mm256_add_epi16(four16,
                                          _mm256_maddubs_epi16(_mm256_and_si256(w4, next2), activations(half_a + 96)));
            }
        }
        const __m256i widened = _mm256_add_epi32(_mm256_madd_epi16(unit16, by4), _mm256_madd_epi16(four16, by1));
        lanes = _mm256_add_epi32(lanes, widened);
    }
    return lanes;
}

namespace {

// ternary_small_batch_rows_avx2's operands (see kernels/ternary_tiles.h).
struct SmallBatchOperands {
    const uint8_t* packed;
    size_t row_bytes;
    const int8_t* a;
    size_t a_stride;
    const int32_t* a_sums;
    const float* factors;
    int blocks;
    float* out;
    size_t out_stride;
};

// Weight rows [r, r + rows) (rows <= 8) against activation rows [first, first + R) of a
// batch: out[(first + i) * out_stride + o] = factors[first + i] * (dot_i(o) - a_sums[first + i]).
// Eight weight rows share one lane-sum reduction and one vector epilogue per activation row:
// done row by row, the epilogue's horizontal sums and scalar stores took about a sixth of a
// decode's kernel samples on the 2B model's 10-block rows (perf, Zen 4 without AVX-512).
// kPrefetch is a template argument so the block loops carry no test for it.
template <int R, bool kPrefetch>
__attribute__((target("avx2"), always_inline)) inline void weight_rows_avx2(const SmallBatchOperands& op, int r,
                                                                            int rows, int first) {
    const int8_t* group_a = op.a + static_cast<size_t>(first) * op.a_stride;
    __m256i lanes[R][8];
    for (int k = 0; k < rows; ++k) {
        const uint8_t* row = op.packed + static_cast<size_t>(r + k) * op.row_bytes;
        __m256i row_lanes[R];
        if constexpr (R == 1) {  // the lone row's loop sums 4 x the dot
            row_lanes[0] = row_lanes_avx2(row, group_a, op.blocks, kPrefetch);
        } else {
            row_group_lanes_avx2<R>(row, group_a, op.a_stride, op.blocks, kPrefetch, row_lanes);
        }
        for (int i = 0; i < R; ++i) lanes[i][k] = row_lanes[i];
    }
    for (int k = rows; k < 8; ++k)
        for (int i = 0; i < R; ++i) lanes[i][k] = _mm256_setzero_si256();
    for (int i = 0; i < R; ++i) {
        __m256i dots = sum_lanes_avx2_x8(lanes[i]);
        if constexpr (R == 1) dots = _mm256_srai_epi32(dots, 2);  // exact: multiples of 4
        const __m256 products = _mm256_cvtepi32_ps(_mm256_sub_epi32(dots, _mm256_set1_epi32(op.a_sums[first + i])));
        const __m256 scaled = _mm256_mul_ps(_mm256_set1_ps(op.factors[first + i]), products);
        float* out_row = op.out + static_cast<size_t>(first + i) * op.out_stride + r;
        if (rows == 8) {
            _mm256_storeu_ps(out_row, scaled);
        } else {
            alignas(32) float tail[8];
            _mm256_store_ps(tail, scaled);
            std::copy(tail, tail + rows, out_row);
        }
    }
}

// The first group of activation rows streams the weight rows in (prefetched); the later ones
// find them in L1 or L2.
template <int R>
__attribute__((target("avx2"))) void group_rows_avx2(const SmallBatchOperands& op, int r, int rows, int first) {
    if (first == 0) {
        weight_rows_avx2<R, true>(op, r, rows, first);
    } else {
        weight_rows_avx2<R, false>(op, r, rows, first);
    }
}

}  // namespace

__attribute__((target("avx2"))) void ternary_small_batch_rows_avx2(const uint8_t* packed, size_t row_bytes,
                                                                   int row_begin, int row_end, const int8_t* a,
                                                                   size_t a_stride, int a_rows, const int32_t* a_sums,
                                                                   const float* factors, int blocks, float* out,
                                                                   size_t out_stride) {
    constexpr int kGroupRows = 4;
    const SmallBatchOperands op{packed, row_bytes, a, a_stride, a_sums, factors, blocks, out, out_stride};
    for (int r = row_begin; r < row_end; r += 8) {
        const int rows = std::min(8, row_end - r);
        for (int first = 0; first < a_rows; first += kGroupRows) {
            switch (std::min(kGroupRows, a_rows - first)) {
                case 1: group_rows_avx2<1>(op, r, rows, first); break;
                case 2: group_rows_avx2<2>(op, r, rows, first); break;
                case 3: group_rows_avx2<3>(op, r, rows, first); break;
                default: group_rows_avx2<4>(op, r, rows, first); break;
            }
        }
    }
}

namespace {

// Adapters that give every instruction set the same template shape, and the switch that runs
// the instantiation for the tile's actual size (edge tiles are smaller).
template <int WR, int AR>
struct Avx512Tile {
    static void run(const uint8_t* const* w, const int8_t* const* a, int blocks, int32_t* dots) {
        tile_avx512<WR, AR>(w, a, blocks, dots);
    }
};

template <template <int, int> class Kernel, int WR>
void run_with_a_rows(const uint8_t* const* w_rows, const int8_t* const* a_rows, int a_count, int blocks,
                     int32_t* dots) {
    switch (a_count) {
        case 1: Kernel<WR, 1>::run(w_rows, a_rows, blocks, dots); break;
        case 2: Kernel<WR, 2>::run(w_rows, a_rows, blocks, dots); break;
        case 3: Kernel<WR, 3>::run(w_rows, a_rows, blocks, dots); break;
        default: Kernel<WR, 4>::run(w_rows, a_rows, blocks, dots); break;
    }
}

template <template <int, int> class Kernel>
void run_tile(const uint8_t* const* w_rows, int w_count, const int8_t* const* a_rows, int a_count, int blocks,
              int32_t* dots) {
    switch (w_count) {
        case 1: run_with_a_rows<Kernel, 1>(w_rows, a_rows, a_count, blocks, dots); break;
        case 2: run_with_a_rows<Kernel, 2>(w_rows, a_rows, a_count, blocks, dots); break;
        case 3: run_with_a_rows<Kernel, 3>(w_rows, a_rows, a_count, blocks, dots); break;
        default: run_with_a_rows<Kernel, 4>(w_rows, a_rows, a_count, blocks, dots); break;
    }
}

}  // namespace

namespace {

// Packed rows [first_row, first_row + count) as one byte a weight, stored code (q + 1) minus
// `offset`: codes (count, blocks * 256) row-major.
__attribute__((target("avx2"))) void unpack_rows_avx2(const uint8_t* packed, size_t row_bytes, int first_row,
                                                      int count, int blocks, int8_t offset, int8_t* codes) {
    // Byte m of half h of a block holds weights 128h + 32n + m at bits 2n as q + 1: one shift and
    // mask per n gives 32 consecutive weights.
    const __m256i two_bits = _mm256_set1_epi8(3), minus = _mm256_set1_epi8(offset);
    for (int i = 0; i < count; ++i) {
        const uint8_t* row = packed + static_cast<size_t>(first_row + i) * row_bytes;
        int8_t* out = codes + static_cast<size_t>(i) * blocks * kTernaryBlock;
        for (int b = 0; b < blocks; ++b)
            for (int half = 0; half < 2; ++half) {
                const __m256i bytes = _mm256_loadu_si256(
                    reinterpret_cast<const __m256i*>(row + static_cast<size_t>(b) * kTernaryBlockBytes + 32 * half));
                for (int n = 0; n < 4; ++n) {
                    const __m256i stored = _mm256_and_si256(_mm256_srli_epi16(bytes, 2 * n), two_bits);
                    _mm256_storeu_si256(
                        reinterpret_cast<__m256i*>(out + static_cast<size_t>(b) * kTernaryBlock + 128 * half + 32 * n),
                        _mm256_sub_epi8(stored, minus));
                }
            }
    }
}

// The prompt's tile on unpacked codes: kPromptTileW weight rows x kPromptTileA activation rows,
// one s16 accumulator each. Per 32 weights a tile spends one maddubs and one add a pair, all
// unpacking done once per weight row for every activation row (the packed 4 x 2 tile it
// replaced spent a shift and a mask a code vector per tile, and a madd a pair every 128
// weights: 1.24x slower on the 2B prompt). 2 x 4 keeps the accumulators, codes and a spare in
// 12 of AVX2's 16 registers; 3 x 4, 2 x 6 and 4 x 2 ran slower.
constexpr int kPromptTileW = 2, kPromptTileA = 4;
// A maddubs of (q + 1) <= 2 and |a| <= 128 adds at most 512 to a s16 lane, so 63 steps of 32
// weights fit (32,256); the K loop is cut into blocks of that many, widened after each.
constexpr int kPromptWidenSteps = 63;

// sums[i][j] += sum over `steps` 32-byte steps of (q + 1)_i * a_j, exactly.
__attribute__((target("avx2"), always_inline)) inline void prompt_tile_avx2(const uint8_t* const* codes,
                                                                           const int8_t* const* a, int steps,
                                                                           int32_t (*sums)[kPromptTileA]) {
    __m256i acc[kPromptTileW][kPromptTileA];
    for (auto& row : acc)
        for (__m256i& v : row) v = _mm256_setzero_si256();
    for (int s = 0; s < steps; ++s) {
        __m256i c[kPromptTileW];
        for (int i = 0; i < kPromptTileW; ++i)
            c[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes[i] + 32 * s));
        for (int j = 0; j < kPromptTileA; ++j) {
            const __m256i x = activations(a[j] + 32 * s);
            for (int i = 0; i < kPromptTileW; ++i)
                acc[i][j] = _mm256_add_epi16(acc[i][j], _mm256_maddubs_epi16(c[i], x));
        }
    }
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int i = 0; i < kPromptTileW; ++i)
        for (int j = 0; j < kPromptTileA; ++j) sums[i][j] += sum_lanes_avx2(_mm256_madd_epi16(acc[i][j], ones16));
}

}  // namespace

__attribute__((target("avx2"))) void ternary_unpack_rows_avx2(const uint8_t* packed, size_t row_bytes, int first_row,
                                                               int count, int blocks, int8_t* codes) {
    unpack_rows_avx2(packed, row_bytes, first_row, count, blocks, 1, codes);
}

__attribute__((target("avx2"))) void ternary_prompt_rows_avx2(const uint8_t* packed, size_t row_bytes, int row_begin,
                                                              int row_end, const int8_t* a, size_t a_stride,
                                                              int a_rows, const int32_t* a_sums, const float* factors,
                                                              int blocks, float* out, size_t out_stride) {
    // Weight rows a chunk at a time, unpacked into 512 KiB or less (L2) and passed by every tile
    // of activation rows; each tile's activations (4 x 2,016 bytes a K block) stay in L1 while
    // the chunk's weight rows pass.
    const size_t padded_cols = static_cast<size_t>(blocks) * kTernaryBlock;
    const int chunk_rows = static_cast<int>(std::clamp<size_t>(512 * 1024 / padded_cols, kPromptTileW, 512));
    thread_local Array<uint8_t> codes;  // (chunk_rows, padded_cols) stored codes q + 1
    thread_local Array<int32_t> sums;   // (chunk_rows, a_rows) exact dots
    if (codes.size() < static_cast<size_t>(chunk_rows) * padded_cols)
        codes = Array<uint8_t>(MemCategory::scratch, static_cast<size_t>(chunk_rows) * padded_cols);
    if (sums.size() < static_cast<size_t>(chunk_rows) * a_rows)
        sums = Array<int32_t>(MemCategory::scratch, static_cast<size_t>(chunk_rows) * a_rows);
    const int steps = static_cast<int>(padded_cols / 32);
    for (int first = row_begin; first < row_end; first += chunk_rows) {
        const int count = std::min(chunk_rows, row_end - first);
        unpack_rows_avx2(packed, row_bytes, first, count, blocks, 0, reinterpret_cast<int8_t*>(codes.data()));
        std::fill(sums.data(), sums.data() + static_cast<size_t>(count) * a_rows, 0);
        for (int step0 = 0; step0 < steps; step0 += kPromptWidenSteps) {
            const int block_steps = std::min(kPromptWidenSteps, steps - step0);
            for (int j0 = 0; j0 < a_rows; j0 += kPromptTileA) {
                // A tile past the last row repeats that row; its sums are dropped.
                const int8_t* a_tile[kPromptTileA];
                for (int j = 0; j < kPromptTileA; ++j)
                    a_tile[j] = a + static_cast<size_t>(std::min(j0 + j, a_rows - 1)) * a_stride + 32 * step0;
                const int a_count = std::min(kPromptTileA, a_rows - j0);
                for (int i0 = 0; i0 < count; i0 += kPromptTileW) {
                    const uint8_t* c_tile[kPromptTileW];
                    for (int i = 0; i < kPromptTileW; ++i)
                        c_tile[i] = codes.data() + static_cast<size_t>(std::min(i0 + i, count - 1)) * padded_cols +
                                    32 * step0;
                    int32_t tile_sums[kPromptTileW][kPromptTileA] = {};
                    prompt_tile_avx2(c_tile, a_tile, block_steps, tile_sums);
                    for (int i = 0; i < std::min(kPromptTileW, count - i0); ++i)
                        for (int j = 0; j < a_count; ++j)
                            sums[static_cast<size_t>(i0 + i) * a_rows + j0 + j] += tile_sums[i][j];
                }
            }
        }
        for (int j = 0; j < a_rows; ++j) {
            float* out_row = out + static_cast<size_t>(j) * out_stride + first;
            for (int i = 0; i < count; ++i)
                out_row[i] = factors[j] * static_cast<float>(sums[static_cast<size_t>(i) * a_rows + j] - a_sums[j]);
        }
    }
}

TernaryTileKernel ternary_tile_kernel_scalar() { return {tile_scalar, 4}; }

TernaryTileKernel ternary_tile_kernel_avx512_vnni() { return {run_tile<Avx512Tile>, 4}; }

}  // namespace dqt
