#include "export/gguf_source.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"
#include "export/opened_gguf.h"
#include "export/rope_rows.h"
#include "export/ternary_blocks.h"

namespace dqt {

GgufSource::GgufSource(GgufReader reader, const ModelConfig& config, const MethodConfig& method)
    : reader_(std::move(reader)),
      config_(config),
      method_(method),
      layout_(make_param_layout(config, method)),
      tensors_(bind_tensors(config, layout_)) {
    // Every tensor the config describes is in the file with its shape before anything is
    // allocated: what a load allocates is bounded by the file, whatever its header claims.
    for (const ParamTensor& t : layout_.tensors) {
        const std::string name = t.name + ".weight";
        const GgufReader::TensorInfo* stored = reader_.find_tensor(name);
        require(stored != nullptr, "GGUF file " + reader_.path() + " lacks the tensor " + name);
        require(stored->ne == gguf_shape(t), "GGUF file " + reader_.path() + ": tensor " + name + " has the wrong shape");
    }
}

FloatWeights GgufSource::read_float_weights(const ParamTensor& t) const {
    const GgufReader::TensorInfo& stored = info(t);
    if (stored.type == GgmlType::f16) {
        Array<Float16> halves(MemCategory::weights, t.count());
        reader_.read_into(stored, halves.data());
        // Counted without an early exit, so that the loop vectorises (a pass over 657 MB for 2B4T's).
        size_t non_finite = 0;
        for (const Float16 half : halves) non_finite += (std::bit_cast<uint16_t>(half) & 0x7c00) == 0x7c00;
        if (non_finite == 0) {
            if (permuted(t)) {
                const std::vector<Float16> file_rows(halves.begin(), halves.end());
                const std::vector<Float16> rows = rows_in_model_order(file_rows, t.rows, t.cols, config_.head_dim(), true);
                std::memcpy(halves.data(), rows.data(), halves.bytes());
            }
            return {std::move(halves), {}};
        }
    }
    Array<float> values(MemCategory::weights, t.count());
    read_values(t, values.data());
    // Other stored types (quantized blocks) stay fp32, as their kernels take them.
    return stored.type == GgmlType::f32 ? narrow_where_exact(std::move(values)) : FloatWeights{{}, std::move(values)};
}

bool GgufSource::read_ternary_packed(const ParamTensor& t, TernaryMatrix& out) const {
    const GgufReader::TensorInfo& stored = info(t);
    if (stored.type != GgmlType::tq2_0 || !t.stores_codes()) return false;
    out.rows = t.rows;
    out.cols = t.cols;
    out.padded_cols = ternary_padded_cols(t.cols);  // = cols: TQ2_0 rows are whole blocks
    out.gamma = integer_scales(t).weight_scale;
    out.packed = Array<uint8_t>(MemCategory::weights, static_cast<size_t>(t.rows) * out.row_bytes());
    const std::vector<uint8_t> blocks = reader_.read(stored);
    decode_tq2_0_packed(blocks.data(), t.rows, t.cols, ternary_block_scale(t), out.packed.data(),
                        reader_.path() + " " + quote_untrusted(stored.name));
    if (permuted(t)) {
        const std::vector<uint8_t> file_rows(out.packed.begin(), out.packed.end());
        const std::vector<uint8_t> rows =
            rows_in_model_order(file_rows, t.rows, static_cast<int>(out.row_bytes()), config_.head_dim(), true);
        std::memcpy(out.packed.data(), rows.data(), rows.size());
    }
    return true;
}

}  // namespace dqt
