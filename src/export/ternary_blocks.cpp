#include "export/ternary_blocks.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/ternary_matmul.h"
#include "quant/f16.h"

namespace dqt {

namespace {

constexpr int kBlock = 256;
constexpr uint16_t kHalfOne = 0x3c00;  // fp16 1.0

void put_half(uint8_t* at, uint16_t half) { std::memcpy(at, &half, 2); }

uint16_t get_half(const uint8_t* at) {
    uint16_t half;
    std::memcpy(&half, at, 2);
    return half;
}

uint16_t ternary_block_scale(const int8_t* codes) {
    for (int i = 0; i < kBlock; ++i)
        if (codes[i] != 0) return kHalfOne;
    return 0;
}

// The trits of a TQ1_0 block in storage order: (byte index, trit position, element).
template <typename Visit>
void for_each_tq1_trit(Visit&& visit) {
    for (int m = 0; m < 32; ++m)
        for (int n = 0; n < 5; ++n) visit(m, n, m + 32 * n);
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 5; ++n) visit(32 + m, n, 160 + m + 16 * n);
    for (int j = 0; j < 4; ++j)
        for (int n = 0; n < 4; ++n) visit(48 + j, n, 240 + j + 4 * n);
}

// Runs once per block: the message is built only on failure.
void require_ternary_scale(uint16_t d) {
    if (d == kHalfOne || d == 0) return;
    throw Error("GGUF ternary block has scale " + format_number(f16_to_float(d)) +
                "; dqt reads the files it wrote (block scale 1, the tensor's scale in <name>.scale)");
}

}  // namespace

std::vector<uint8_t> encode_tq2_0(const int8_t* codes, int rows, int cols) {
    require(cols % kBlock == 0, "TQ2_0 needs rows that are a multiple of 256 elements");
    const size_t blocks = static_cast<size_t>(rows) * (cols / kBlock);
    std::vector<uint8_t> out(blocks * 66, 0);
    for (size_t b = 0; b < blocks; ++b) {
        const int8_t* q = codes + b * kBlock;
        uint8_t* block = out.data() + b * 66;
        for (int e = 0; e < kBlock; ++e) {
            const TernaryCodeSlot slot = ternary_code_slot(e);  // the inference kernels' layout is TQ2_0's
            block[slot.byte] = static_cast<uint8_t>(block[slot.byte] | ((q[e] + 1) << slot.shift));
        }
        put_half(block + 64, ternary_block_scale(q));
    }
    return out;
}

BlockCodes decode_tq2_0_blocks(const uint8_t* data, int rows, int cols, const std::string& what) {
    const size_t blocks = static_cast<size_t>(rows) * (cols / kBlock);
    BlockCodes out{std::vector<int8_t>(blocks * kBlock), std::vector<float>(blocks)};
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* block = data + b * 66;
        out.block_scales[b] = f16_to_float(get_half(block + 64));
        // In the bytes' order (ternary_code_slot's, inverted): byte m of half h holds elements
        // 128h + 32n + m at bits 2n.
        int8_t* codes = out.codes.data() + b * kBlock;
        bool unused_code = false;  // checked once a block: the message is built only on failure
        for (int half = 0; half < 2; ++half) {
            for (int n = 0; n < 4; ++n) {
                for (int m = 0; m < 32; ++m) {
                    const int code = (block[32 * half + m] >> (2 * n)) & 3;
                    unused_code |= code == 3;
                    codes[128 * half + 32 * n + m] = static_cast<int8_t>(code - 1);
                }
            }
        }
        if (unused_code) throw Error("GGUF TQ2_0 tensor " + what + " holds the unused code 3");
    }
    return out;
}

void decode_tq2_0_packed(const uint8_t* data, int rows, int cols, float block_scale, uint8_t* packed,
                         const std::string& what) {
    constexpr uint8_t kZeroCodes = 0x55;  // four q = 0, stored 1
    const size_t blocks = static_cast<size_t>(rows) * (cols / kBlock);
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* block = data + b * 66;
        uint8_t* out = packed + b * 64;
        const float d = f16_to_float(get_half(block + 64));
        if (d == 0.0f) {
            std::memset(out, kZeroCodes, 64);
            continue;
        }
        if (d != block_scale)
            throw Error("GGUF TQ2_0 tensor " + what + " has a block scale of " + format_number(d) + " where " +
                        format_number(block_scale) + " was expected");
        // A 2-bit field holds 3 where both its bits are set.
        uint8_t unused_code = 0;
        for (int i = 0; i < 64; ++i) unused_code |= block[i] & (block[i] >> 1) & 0x55;
        if (unused_code != 0) throw Error("GGUF TQ2_0 tensor " + what + " holds the unused code 3");
        std::memcpy(out, block, 64);
    }
}

namespace {

// dqt's own blocks: d is 1, or 0 for a block of zero codes (whatever its bits say).
std::vector<int8_t> unit_scale_codes(BlockCodes blocks) {
    for (size_t b = 0; b < blocks.block_scales.size(); ++b) {
        const float d = blocks.block_scales[b];
        require_ternary_scale(float_to_f16(d));
        if (d == 0) std::fill_n(blocks.codes.begin() + static_cast<ptrdiff_t>(b) * kBlock, kBlock, int8_t{0});
    }
    return std::move(blocks.codes);
}

}  // namespace

std::vector<int8_t> decode_tq2_0(const uint8_t* data, int rows, int cols) {
    return unit_scale_codes(decode_tq2_0_blocks(data, rows, cols, "(dqt's export)"));
}

std::vector<uint8_t> encode_tq1_0(const int8_t* codes, int rows, int cols) {
    require(cols % kBlock == 0, "TQ1_0 needs rows that are a multiple of 256 elements");
    const size_t blocks = static_cast<size_t>(rows) * (cols / kBlock);
    std::vector<uint8_t> out(blocks * 54, 0);
    for (size_t b = 0; b < blocks; ++b) {
        const int8_t* q = codes + b * kBlock;
        uint8_t* block = out.data() + b * 54;
        int value[52] = {};  // base-3 number per byte, first trit most significant
        for_each_tq1_trit([&](int byte, int, int element) { value[byte] = value[byte] * 3 + (q[element] + 1); });
        for (int byte = 0; byte < 52; ++byte) {
            const int v = byte >= 48 ? value[byte] * 3 : value[byte];  // 4-trit bytes: shift to the top trit
            block[byte] = static_cast<uint8_t>((v * 256 + 242) / 243);
        }
        put_half(block + 52, ternary_block_scale(q));
    }
    return out;
}

BlockCodes decode_tq1_0_blocks(const uint8_t* data, int rows, int cols) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    const size_t blocks = static_cast<size_t>(rows) * (cols / kBlock);
    BlockCodes out{std::vector<int8_t>(blocks * kBlock), std::vector<float>(blocks)};
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* block = data + b * 54;
        out.block_scales[b] = f16_to_float(get_half(block + 52));
        for_each_tq1_trit([&](int byte, int n, int element) {
            const uint8_t shifted = static_cast<uint8_t>(block[byte] * kPow3[n]);
            const int trit = (static_cast<uint16_t>(shifted) * 3) >> 8;
            out.codes[b * kBlock + element] = static_cast<int8_t>(trit - 1);
        });
    }
    return out;
}

std::vector<int8_t> decode_tq1_0(const uint8_t* data, int rows, int cols) {
    return unit_scale_codes(decode_tq1_0_blocks(data, rows, cols));
}

std::vector<uint8_t> encode_q8_0_unit_scale(const int8_t* codes, int rows, int cols) {
    require(cols % 32 == 0, "Q8_0 needs rows that are a multiple of 32 elements");
    const size_t blocks = static_cast<size_t>(rows) * (cols / 32);
    std::vector<uint8_t> out(blocks * 34);
    for (size_t b = 0; b < blocks; ++b) {
        put_half(out.data() + b * 34, kHalfOne);
        std::memcpy(out.data() + b * 34 + 2, codes + b * 32, 32);
    }
    return out;
}

BlockCodes decode_q8_0_blocks(const uint8_t* data, int rows, int cols) {
    const size_t blocks = static_cast<size_t>(rows) * (cols / 32);
    BlockCodes out{std::vector<int8_t>(blocks * 32), std::vector<float>(blocks)};
    for (size_t b = 0; b < blocks; ++b) {
        out.block_scales[b] = f16_to_float(get_half(data + b * 34));
        std::memcpy(out.codes.data() + b * 32, data + b * 34 + 2, 32);
    }
    return out;
}

std::vector<int8_t> decode_q8_0_unit_scale(const uint8_t* data, int rows, int cols, const std::string& what) {
    BlockCodes blocks = decode_q8_0_blocks(data, rows, cols);
    for (float d : blocks.block_scales)
        if (d != 1.0f) throw Error("GGUF Q8_0 tensor " + what + " has a block scale other than 1: not written by dqt");
    return std::move(blocks.codes);
}

}  // namespace dqt
