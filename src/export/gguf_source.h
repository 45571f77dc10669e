#pragma once
// What the two kinds of GGUF model file share as TensorSources (model/tensor_source.h): the
// open file, the model it describes, and the fp16 read. dqt's own files: export/gguf_model.cpp;
// llama.cpp's: export/llamacpp_gguf.cpp.
#include "io/gguf.h"
#include "model/tensor_source.h"

namespace dqt {

class GgufSource : public TensorSource {
public:
    GgufSource(GgufReader reader, const ModelConfig& config, const MethodConfig& method);
    const ModelConfig& config() const override { return config_; }
    const MethodConfig& method() const override { return method_; }
    const ModelTensors& tensors() const override { return tensors_; }
    // F16 tensors as stored (fp32 where one holds a NaN or an infinity, which fp32 weights never
    // narrow to), F32 ones as fp16 where every value is one exactly; in dqt's row order.
    FloatWeights read_float_weights(const ParamTensor& t) const override;
    // TQ2_0 tensors: their blocks' codes copied as they are (export/ternary_blocks.h).
    bool read_ternary_packed(const ParamTensor& t, TernaryMatrix& out) const override;

protected:
    // A coded tensor's scales, and the d a ternary one's TQ2_0 blocks hold where not all zero.
    virtual IntegerScales integer_scales(const ParamTensor& t) const = 0;
    virtual float ternary_block_scale(const ParamTensor& t) const = 0;
    // The file's tensor of t: the constructor checked that every one of the layout is there.
    const GgufReader::TensorInfo& info(const ParamTensor& t) const { return *reader_.find_tensor(t.name + ".weight"); }
    // Whether the file holds t's rows in another order than dqt's (export/rope_rows.h).
    virtual bool permuted(const ParamTensor& /*t*/) const { return false; }

    GgufReader reader_;
    ModelConfig config_;
    MethodConfig method_;
    ParamLayout layout_;
    ModelTensors tensors_;  // into layout_
};

}  // namespace dqt
