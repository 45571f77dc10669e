#pragma once
// IEEE half precision (fp16) conversions, round to nearest even; used where a file format
// stores fp16 (GGUF's F16 tensors and the block scales of Q8_0 / TQ1_0 / TQ2_0).
#include <cstdint>

namespace dqt {

uint16_t float_to_f16(float x);
float f16_to_float(uint16_t h);

}  // namespace dqt
