#pragma once
// Runs an element-wise update over a tensor's moments in parallel blocks, whatever their
// storage: kernel(first, last, m, v) gets m and v pointing at element `first`, as float*
// (fp32 state, or an 8-bit block dequantized into a local array and quantized back after) or
// uint16_t* (bf16, converted per element by load_moment / store_moment). Blocks are multiples
// of 4 elements (one packed ternary byte) and of kStateBlock, and each element's result depends
// only on its own inputs, so the split never changes a bit of the result.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "optim/optimizer_state.h"
#include "quant/bf16.h"
#include "quant/dynamic8.h"

namespace dqt {

// Typed access for the update kernels: one templated loop serves fp32 and bf16 moments.
inline float load_moment(const float* p, size_t i) { return p[i]; }
inline float load_moment(const uint16_t* p, size_t i) { return bf16_to_float(p[i]); }
inline void store_moment(float* p, size_t i, float x) { p[i] = x; }
inline void store_moment(uint16_t* p, size_t i, float x) { p[i] = float_to_bf16(x); }

// Elements [range_first, range_last) of the tensor, inside the moments' elements; range_first
// must be a multiple of kStateBlock (model/gradient_sink.h pieces and shard cuts are).
template <typename Kernel>
void for_each_moment_block(TensorMoments& moments, size_t range_first, size_t range_last, Kernel&& kernel) {
    if (moments.dtype == StateDtype::q8) {
        const size_t first_block = (range_first - moments.first) / kStateBlock;
        const size_t blocks = (range_last - range_first + kStateBlock - 1) / kStateBlock;
        uint8_t* m_codes = moments.m.as<uint8_t>();
        uint8_t* v_codes = moments.v.as<uint8_t>();
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < blocks; ++k) {
            const size_t block = first_block + k;  // of the moments
            const size_t local = block * kStateBlock;
            const size_t first = moments.first + local, n = std::min(kStateBlock, range_last - first);
            float m[kStateBlock], v[kStateBlock];
            // v is stored as sqrt(v) (optimizer_state.h says why).
            dequantize_block8(m, m_codes + local, n, moments.m_absmax[block], dynamic_map_signed());
            dequantize_block8(v, v_codes + local, n, moments.v_absmax[block], dynamic_map_unsigned());
            for (size_t i = 0; i < n; ++i) v[i] *= v[i];
            kernel(first, first + n, m, v);
            for (size_t i = 0; i < n; ++i) v[i] = std::sqrt(v[i]);
            moments.m_absmax[block] = quantize_block8(m_codes + local, m, n, dynamic_map_signed());
            moments.v_absmax[block] = quantize_block8(v_codes + local, v, n, dynamic_map_unsigned());
        }
        return;
    }
    constexpr size_t kChunk = 16 * kStateBlock;  // 4096 elements of parallel work
    const size_t chunks = (range_last - range_first + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
    for (size_t chunk = 0; chunk < chunks; ++chunk) {
        const size_t first = range_first + chunk * kChunk, last = std::min(range_last, first + kChunk);
        const size_t local = first - moments.first;
        if (moments.dtype == StateDtype::fp32) {
            kernel(first, last, moments.m.as<float>() + local, moments.v.as<float>() + local);
        } else {
            kernel(first, last, moments.m.as<uint16_t>() + local, moments.v.as<uint16_t>() + local);
        }
    }
}

}  // namespace dqt
