#include "data/sentencepiece_proto.h"

#include <cstdint>
#include <cstring>

namespace dqt {

namespace {

constexpr int kVarint = 0, kLengthDelimited = 2, kFixed32 = 5;
constexpr int kBytePiece = 6;

void put_varint(std::string& out, uint64_t value) {
    while (value >= 0x80) {
        out.push_back(static_cast<char>((value & 0x7f) | 0x80));
        value >>= 7;
    }
    out.push_back(static_cast<char>(value));
}

void put_tag(std::string& out, int field, int wire_type) {
    put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
    put_tag(out, field, kLengthDelimited);
    put_varint(out, bytes.size());
    out += bytes;
}

void put_uint(std::string& out, int field, uint64_t value) {
    put_tag(out, field, kVarint);
    put_varint(out, value);
}

void put_float(std::string& out, int field, float value) {
    put_tag(out, field, kFixed32);
    char bytes[4];
    std::memcpy(bytes, &value, 4);  // protobuf's fixed32 is little endian, as this machine is
    out.append(bytes, 4);
}

}  // namespace

std::string sentencepiece_bpe_proto(const std::vector<SentencepiecePiece>& pieces,
                                    const SentencepieceNormalizer& normalizer) {
    std::string model;
    bool has_byte_pieces = false;
    for (const SentencepiecePiece& p : pieces) {
        std::string piece;
        put_bytes(piece, 1, p.piece);
        put_float(piece, 2, p.score);
        put_uint(piece, 3, static_cast<uint64_t>(p.type));
        put_bytes(model, 1, piece);
        has_byte_pieces = has_byte_pieces || p.type == kBytePiece;
    }
    std::string trainer;
    put_uint(trainer, 3, 2);  // model_type BPE
    put_uint(trainer, 35, has_byte_pieces ? 1 : 0);
    put_bytes(model, 2, trainer);
    std::string normalizer_spec;
    put_bytes(normalizer_spec, 1, "identity");
    put_uint(normalizer_spec, 3, normalizer.add_dummy_prefix ? 1 : 0);
    put_uint(normalizer_spec, 4, normalizer.remove_extra_whitespaces ? 1 : 0);
    put_uint(normalizer_spec, 5, 1);
    put_bytes(model, 3, normalizer_spec);
    return model;
}

std::string sentencepiece_without_dummy_prefix(const std::string& proto) {
    std::string normalizer_spec;
    put_uint(normalizer_spec, 3, 0);
    std::string out = proto;
    put_bytes(out, 3, normalizer_spec);
    return out;
}

}  // namespace dqt
