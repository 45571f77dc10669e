#pragma once
// The optimizer on the GPU, one fused kernel per tensor and range:
//   the DQT update of an integer-coded tensor (optim/dqt_update.h): gradient -> Adam moments in
//   32, 16 or 8 bits -> stochastic rounding -> codes, packed in GPU memory as on the CPU (2 bits
//   a ternary weight, a byte up to 8 bits), with no fp32 copy of the weights at any time;
//   AdamW of an fp32 tensor (optim/adamw.h), moments in the same storages.
// Each element runs optim/update_elements.h, the CPU's own code, with the same random numbers
// (quant/rounding.h), so CPU and GPU write the same codes, weights and moments, bit for bit,
// from the same inputs.
#include <cstddef>
#include <cstdint>

#include "cuda/device_memory.h"
#include "optim/adamw.h"
#include "optim/dqt_update.h"
#include "optim/optimizer_state.h"

namespace dqt::cuda {

// One tensor's Adam moments on the GPU, all of its elements, stored as on the CPU
// (optim/optimizer_state.h): fp32, bf16, or 8-bit blocks of kStateBlock with an absmax each.
struct DeviceMoments {
    StateDtype dtype = StateDtype::fp32;
    size_t count = 0;
    DeviceBuffer m, v;                      // (count) fp32 / bf16 / 8-bit codes of m and sqrt(v)
    DeviceArray<float> m_absmax, v_absmax;  // (blocks) 8-bit only
    DeviceArray<int8_t> residual;           // (count) sub-grid residuals, when the run keeps them
    float scale_moments[2] = {};            // a learned scale's {m, v}: on the host, as its update

    DeviceMoments() = default;
    // A copy of the whole tensor's CPU moments (first == 0).
    explicit DeviceMoments(const TensorMoments& host);
    void copy_to(TensorMoments& host) const;
};

// A coded tensor on the GPU: codes (code_bytes(grid, count)) and its fp32 scale, both device
// pointers.
struct DeviceCodedTensor {
    uint8_t* codes;
    float* scale;
    size_t count;
    CodeGrid grid;
    int tensor_id;
};

// One step of a coded tensor: apply() to element ranges (each once; first a multiple of
// kStateBlock), then finish(). Kernels run in order on the default stream.
class DeviceDqtStep {
public:
    DeviceDqtStep(const DeviceCodedTensor& tensor, const AdamWConfig& config, float lr, int64_t t,
                  const DqtRounding& rounding);
    // g: device gradient of elements [first, last).
    void apply(const float* g, DeviceMoments& moments, size_t first, size_t last);
    // Stores the new scale (the learned rule waits for the kernels: its scale step runs on the
    // host, as optim/dqt_update.cpp's, from the exact sum of g_i q_i).
    void finish(DeviceMoments& moments);

private:
    DeviceCodedTensor tensor_;
    DqtStepConstants k_;  // old_scale and new_scale are read on the device
    DeviceArray<int> top_code_;         // (1) the reference rule's max code
    DeviceArray<long long> dot_parts_;  // (blocks of the tensor) sum g_i q_i per block, exact
};

// One AdamW step of an fp32 tensor: apply() to element ranges (each once; first a multiple of
// kStateBlock).
class DeviceAdamWStep {
public:
    DeviceAdamWStep(const AdamWConfig& config, float lr, int64_t t, bool decay);
    // w: the device tensor (all of it); g: device gradient of elements [first, last).
    void apply(float* w, const float* g, DeviceMoments& moments, size_t first, size_t last) const;

private:
    AdamWConstants k_;
};

}  // namespace dqt::cuda
