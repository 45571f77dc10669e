#pragma once
// llama.cpp's block formats for integer codes, with the block scale that makes a code its own
// value (the real scale travels in a separate `.scale` tensor; export/gguf_model.h):
//   TQ2_0 (66 bytes / 256): 64 bytes of 2-bit codes q + 1, then fp16 d. In each 32-byte half,
//         byte m holds element 128h + 32n + m at bits 2n (kernels/ternary_matmul.h's layout).
//   TQ1_0 (54 bytes / 256): 48 bytes of 5 trits each, 4 bytes of 4 trits each, then fp16 d.
//         Byte m < 32 holds elements m + 32n (n = 0..4), byte 32 + m (m < 16) holds
//         160 + m + 16n, byte 48 + j holds 240 + j + 4n (n = 0..3); the trits t = q + 1 form
//         a base-3 number, first element most significant (4-trit bytes times 3), stored as
//         ceil(value * 256 / 243) so that trit n = ((byte * 3^n) mod 256) * 3 >> 8.
//   Q8_0  (34 bytes / 32): fp16 d, then 32 int8 codes.
// dqt writes ternary blocks with d = 1 (0 when every code of the block is 0) and Q8_0 blocks with
// d = 1; the *_unit_scale decoders refuse any other d (such a file was not written by dqt). The
// *_blocks decoders read any writer's blocks (llama.cpp's converter puts the weights' scale in d:
// export/llamacpp_gguf.h).
#include <cstdint>
#include <string>
#include <vector>

namespace dqt {

// codes (rows, cols), cols a multiple of 256 (TQ) or 32 (Q8_0).
std::vector<uint8_t> encode_tq2_0(const int8_t* codes, int rows, int cols);
std::vector<uint8_t> encode_tq1_0(const int8_t* codes, int rows, int cols);
std::vector<uint8_t> encode_q8_0_unit_scale(const int8_t* codes, int rows, int cols);

// A tensor's codes with each block's scale d: element i's value is codes[i] * block_scales[i / block].
struct BlockCodes {
    std::vector<int8_t> codes;        // (rows, cols)
    std::vector<float> block_scales;  // (rows, cols / block): fp16 d widened
};
// Refuse a TQ2_0 code 3 (no trit): `what` names the tensor.
BlockCodes decode_tq2_0_blocks(const uint8_t* data, int rows, int cols, const std::string& what);
BlockCodes decode_tq1_0_blocks(const uint8_t* data, int rows, int cols);
BlockCodes decode_q8_0_blocks(const uint8_t* data, int rows, int cols);

std::vector<int8_t> decode_tq2_0(const uint8_t* data, int rows, int cols);
// TQ2_0 blocks of a (rows, cols) tensor straight into the ternary kernels' packed rows
// (kernels/ternary_matmul.h: TQ2_0's codes without d), packed (rows, cols / 4). A block whose
// d is 0 holds zero codes whatever its bits; every other block's d must be `block_scale`.
// dqt::Error naming `what` for another d or the unused code 3.
void decode_tq2_0_packed(const uint8_t* data, int rows, int cols, float block_scale, uint8_t* packed,
                         const std::string& what);
std::vector<int8_t> decode_tq1_0(const uint8_t* data, int rows, int cols);
// `what` names the tensor in errors.
std::vector<int8_t> decode_q8_0_unit_scale(const uint8_t* data, int rows, int cols, const std::string& what);

}  // namespace dqt
