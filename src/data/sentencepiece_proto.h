#pragma once
// A sentencepiece model (its ModelProto, sentencepiece_model.proto) built from a vocabulary
// list, as GGUF files carry one (tokenizer.ggml.tokens, .scores, .token_type; llama.cpp's
// "llama" tokenizer): a BPE model merging by piece score. Debian's libsentencepiece-dev ships
// no protobuf classes for the proto, and these few fields are plain protobuf wire format:
//   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece   1 piece (string), 2 score (float), 3 type (enum)
//   TrainerSpec     3 model_type (BPE = 2), 35 byte_fallback
//   NormalizerSpec  1 name ("identity": no rule), 3 add_dummy_prefix, 4 remove_extra_whitespaces,
//                   5 escape_whitespaces (spaces become U+2581)
#include <string>
#include <vector>

namespace dqt {

struct SentencepiecePiece {
    std::string piece;
    float score = 0.0f;
    int type = 1;  // sentencepiece's (and llama.cpp's) numbering: 1 normal, 2 unknown, 3 control,
                   // 4 user defined, 5 unused, 6 byte
};

struct SentencepieceNormalizer {
    bool add_dummy_prefix = false;          // a space before the text
    bool remove_extra_whitespaces = false;  // fold runs of spaces, strip the ends
};

// The serialized ModelProto; byte_fallback is set when any piece is a byte piece.
std::string sentencepiece_bpe_proto(const std::vector<SentencepiecePiece>& pieces,
                                    const SentencepieceNormalizer& normalizer);

// The same model without its dummy prefix: a second normalizer_spec holding only
// add_dummy_prefix = false is appended, which protobuf merges into the first (a repeated
// embedded message merges; the later scalar wins).
std::string sentencepiece_without_dummy_prefix(const std::string& proto);

}  // namespace dqt
