// Compiled with --fmad=false (CMakeLists.txt): optim/update_elements.h must round as on the CPU.
#include "cuda/optimizer_update.h"

#include <mutex>
#include <vector>

#include "core/exact_sum.h"
#include "cuda/cuda_check.h"
#include "optim/update_elements.h"
#include "quant/dynamic8.h"

namespace dqt::cuda {

namespace {

constexpr int kElementsPerThread = 4;  // one packed ternary byte
constexpr int kThreads = static_cast<int>(kStateBlock) / kElementsPerThread;  // a block per state block
static_assert(kStateBlock % (32 * kElementsPerThread) == 0, "a state block is whole warps");
constexpr int kWarps = kThreads / 32;

// The 8-bit state's dynamic maps (quant/dynamic8.h), copied once from the CPU's. Each block
// copies them to shared memory: threads index them by their own codes, which constant memory
// would serialise.
struct DynamicMaps {
    float signed_values[256], signed_thresholds[255];
    float unsigned_values[256], unsigned_thresholds[255];
};
__constant__ DynamicMaps dynamic_maps;

void upload_dynamic_maps() {
    static std::once_flag once;
    std::call_once(once, [] {
        DynamicMaps maps;
        const DynamicMap& s = dynamic_map_signed();
        const DynamicMap& u = dynamic_map_unsigned();
        std::copy(s.values.begin(), s.values.end(), maps.signed_values);
        std::copy(s.thresholds.begin(), s.thresholds.end(), maps.signed_thresholds);
        std::copy(u.values.begin(), u.values.end(), maps.unsigned_values);
        std::copy(u.thresholds.begin(), u.thresholds.end(), maps.unsigned_thresholds);
        cuda_check(cudaMemcpyToSymbol(dynamic_maps, &maps, sizeof maps), "copy of the 8-bit state's maps");
    });
}

// quantize_block8's code: the number of thresholds below x (the nearest value, ties low).
__device__ int nearest_map_code(float x, const float* thresholds) {
    int low = 0, high = 255;
    while (low < high) {
        const int mid = (low + high) / 2;
        if (thresholds[mid] < x) low = mid + 1; else high = mid;
    }
    return low;
}

// quant/bf16.h's conversions.
__device__ float bf16_to_float_device(uint16_t x) { return __uint_as_float(static_cast<uint32_t>(x) << 16); }
__device__ uint16_t float_to_bf16_device(float x) {
    const uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
    return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// std::max(a, b) as the CPU computes it.
__device__ float max_like_std(float a, float b) { return a < b ? b : a; }

__device__ float block_max(float x, float* shared) {
    for (int offset = 16; offset > 0; offset /= 2) x = max_like_std(x, __shfl_xor_sync(0xffffffffu, x, offset));
    __syncthreads();  // shared is reused by consecutive calls
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
    __syncthreads();
    float result = shared[0];
    for (int w = 1; w < kWarps; ++w) result = max_like_std(result, shared[w]);
    return result;
}

__device__ long long block_sum(long long x, long long* shared) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
    __syncthreads();
    long long result = 0;
    for (int w = 0; w < kWarps; ++w) result += shared[w];
    return result;
}

__global__ void max_code_kernel(const uint8_t* codes, size_t count, CodeGrid grid, int* top) {
    int best = grid.qn() - 1;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int q = read_code(codes, grid, i);
        best = q > best ? q : best;
    }
    atomicMax(top, best);
}

enum class MomentKind { fp32, bf16, q8 };

struct MomentPointers {
    void* m;
    void* v;
    float* m_absmax;  // q8
    float* v_absmax;
};

// The DQT update's elements (optim/dqt_update.cpp's update_range, element by element).
struct DqtElements {
    DqtStepConstants k;  // old_scale, new_scale: set per thread from the device
    uint8_t* codes;
    const float* scale;
    const int* top_code;
    const float* g;  // at element `first` of the range
    size_t first;
    int8_t* residual;      // null without residuals
    long long* dot_parts;  // (state blocks of the tensor); null unless the scale is learned

    struct Thread {
        DqtStepConstants k;
        float inv_old_scale;
        float q[kElementsPerThread];
        float u[kElementsPerThread];
    };

    __device__ Thread begin(size_t e0, int n) const {
        Thread t;
        t.k = k;
        const float old_scale = *scale;
        t.k.old_scale = old_scale;
        t.k.new_scale = k.learned_scale ? old_scale : reference_rule_scale(old_scale, k.grid.qp(), *top_code);
        t.inv_old_scale = 1.0f / old_scale;
#pragma unroll
        for (int j = 0; j < kElementsPerThread; ++j) {
            t.u[j] = 0.0f;
            t.q[j] = j < n ? static_cast<float>(read_code(codes, k.grid, e0 + j)) : 0.0f;
        }
        if (k.stochastic && n > 0) {
            const auto draw = rounding_uniforms(k.seed, k.t, k.tensor_id, e0 / 4);
#pragma unroll
            for (int j = 0; j < kElementsPerThread; ++j) t.u[j] = draw[j];
        }
        return t;
    }
    __device__ bool sums_code_gradient() const { return dot_parts != nullptr; }
    __device__ long long code_gradient_part(const Thread& t, size_t e0, int n) const {
        long long part = 0;
#pragma unroll
        for (int j = 0; j < kElementsPerThread; ++j) {
            if (j < n) part += exact_term(static_cast<double>(g[e0 + j - first]) * t.q[j]);
        }
        return part;
    }
    __device__ void store_code_gradient(size_t state_block, long long sum) const { dot_parts[state_block] = sum; }
    __device__ void update(Thread& t, size_t i, int j, float& m, float& v) const {
        float position = t.q[j];
        if (residual) position += static_cast<float>(residual[i]) * t.k.inv_residual_steps;
        t.q[j] = dqt_update_element(t.k, t.inv_old_scale, position, g[i - first], m, v, t.u[j],
                                    residual ? &residual[i] : nullptr);
    }
    __device__ void end(const Thread& t, size_t e0, int n) const {
        if (n == 0) return;
        if (k.grid.ternary()) {  // the thread's four elements are one byte
            uint8_t byte = codes[e0 / 4];
#pragma unroll
            for (int j = 0; j < kElementsPerThread; ++j) {
                const int shift = 2 * j;
                if (j < n) byte = static_cast<uint8_t>((byte & ~(3 << shift)) | ((static_cast<int>(t.q[j]) + 1) << shift));
            }
            codes[e0 / 4] = byte;
        } else {
#pragma unroll
            for (int j = 0; j < kElementsPerThread; ++j) {
                if (j < n) codes[e0 + j] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(t.q[j])));
            }
        }
    }
};

// AdamW's elements (optim/adamw.cpp).
struct AdamWElements {
    AdamWConstants k;
    float* w;        // the whole tensor
    const float* g;  // at element `first` of the range
    size_t first;

    struct Thread {};
    __device__ Thread begin(size_t, int) const { return {}; }
    __device__ bool sums_code_gradient() const { return false; }
    __device__ long long code_gradient_part(const Thread&, size_t, int) const { return 0; }
    __device__ void store_code_gradient(size_t, long long) const {}
    __device__ void update(Thread&, size_t i, int, float& m, float& v) const {
        w[i] = adamw_element(k, w[i], g[i - first], m, v);
    }
    __device__ void end(const Thread&, size_t, int) const {}
};

// One block: the kStateBlock elements from first + blockIdx.x * kStateBlock (a state block of
// the tensor); each thread four consecutive ones. Moments are read and written in their
// storage as optim/moment_blocks.h does on the CPU.
template <MomentKind kind, typename Elements>
__global__ void __launch_bounds__(kThreads) moment_update_kernel(Elements elements, size_t first, size_t last,
                                                                  MomentPointers moments) {
    __shared__ float shared_max[kWarps];
    __shared__ long long shared_sum[kWarps];
    __shared__ DynamicMaps maps;
    if constexpr (kind == MomentKind::q8) {
        for (int i = threadIdx.x; i < 256; i += kThreads) {
            maps.signed_values[i] = dynamic_maps.signed_values[i];
            maps.unsigned_values[i] = dynamic_maps.unsigned_values[i];
            if (i < 255) {
                maps.signed_thresholds[i] = dynamic_maps.signed_thresholds[i];
                maps.unsigned_thresholds[i] = dynamic_maps.unsigned_thresholds[i];
            }
        }
        __syncthreads();
    }
    // A grid-stride loop over the range's state blocks, so that the maps above are copied once
    // per CUDA block rather than once per 256 elements.
    const size_t state_blocks = (last - first + kStateBlock - 1) / kStateBlock;
    for (size_t local_block = blockIdx.x; local_block < state_blocks; local_block += gridDim.x) {
        const size_t block_first = first + local_block * kStateBlock;
        const size_t state_block = block_first / kStateBlock;
        const size_t e0 = block_first + threadIdx.x * kElementsPerThread;
        int n = 0;  // elements of this thread inside the range
        for (int j = 0; j < kElementsPerThread && e0 + j < last; ++j) n = j + 1;
        typename Elements::Thread thread = elements.begin(e0, n);
        if (elements.sums_code_gradient()) {
            const long long sum = block_sum(elements.code_gradient_part(thread, e0, n), shared_sum);
            if (threadIdx.x == 0) elements.store_code_gradient(state_block, sum);
        }
        // Loops over the thread's elements are unrolled with `j < n` guards: register arrays indexed
        // by a run-time j would go to local memory.
        float m[kElementsPerThread] = {}, v[kElementsPerThread] = {};
    #pragma unroll
        for (int j = 0; j < kElementsPerThread; ++j) {
            if (j >= n) continue;
            const size_t i = e0 + j;
            if constexpr (kind == MomentKind::fp32) {
                m[j] = static_cast<const float*>(moments.m)[i];
                v[j] = static_cast<const float*>(moments.v)[i];
            } else if constexpr (kind == MomentKind::bf16) {
                m[j] = bf16_to_float_device(static_cast<const uint16_t*>(moments.m)[i]);
                v[j] = bf16_to_float_device(static_cast<const uint16_t*>(moments.v)[i]);
            } else {
                m[j] = maps.signed_values[static_cast<const uint8_t*>(moments.m)[i]] * moments.m_absmax[state_block];
                v[j] = maps.unsigned_values[static_cast<const uint8_t*>(moments.v)[i]] * moments.v_absmax[state_block];
                v[j] *= v[j];  // sqrt(v) is stored
            }
            elements.update(thread, i, j, m[j], v[j]);
        }
        if constexpr (kind == MomentKind::q8) {
            float m_max = 0.0f, v_max = 0.0f;
    #pragma unroll
            for (int j = 0; j < kElementsPerThread; ++j) {
                if (j >= n) continue;
                v[j] = sqrtf(v[j]);
                m_max = max_like_std(m_max, fabsf(m[j]));
                v_max = max_like_std(v_max, fabsf(v[j]));
            }
            m_max = block_max(m_max, shared_max);
            v_max = block_max(v_max, shared_max);
            const float m_inv = m_max > 0.0f ? 1.0f / m_max : 0.0f, v_inv = v_max > 0.0f ? 1.0f / v_max : 0.0f;
    #pragma unroll
            for (int j = 0; j < kElementsPerThread; ++j) {
                if (j >= n) continue;
                static_cast<uint8_t*>(moments.m)[e0 + j] = static_cast<uint8_t>(nearest_map_code(m[j] * m_inv, maps.signed_thresholds));
                static_cast<uint8_t*>(moments.v)[e0 + j] = static_cast<uint8_t>(nearest_map_code(v[j] * v_inv, maps.unsigned_thresholds));
            }
            if (threadIdx.x == 0) {
                moments.m_absmax[state_block] = m_max;
                moments.v_absmax[state_block] = v_max;
            }
        } else {
    #pragma unroll
            for (int j = 0; j < kElementsPerThread; ++j) {
                if (j >= n) continue;
                if constexpr (kind == MomentKind::fp32) {
                    static_cast<float*>(moments.m)[e0 + j] = m[j];
                    static_cast<float*>(moments.v)[e0 + j] = v[j];
                } else {
                    static_cast<uint16_t*>(moments.m)[e0 + j] = float_to_bf16_device(m[j]);
                    static_cast<uint16_t*>(moments.v)[e0 + j] = float_to_bf16_device(v[j]);
                }
            }
        }
        elements.end(thread, e0, n);
        __syncthreads();  // the next state block reuses the shared sums
    }
}

template <typename Elements>
void launch_update(const Elements& elements, DeviceMoments& moments, size_t first, size_t last) {
    upload_dynamic_maps();
    require(first % kStateBlock == 0 && first <= last && last <= moments.count,
            "GPU optimizer: a range must start at a multiple of the state block and lie in the tensor");
    if (first == last) return;
    constexpr unsigned kMaxBlocks = 8192;  // enough to fill any GPU; each then loops
    const unsigned blocks = std::min(kMaxBlocks, blocks_for(last - first, kStateBlock));
    const MomentPointers pointers{moments.m.data(), moments.v.data(), moments.m_absmax.data(), moments.v_absmax.data()};
    switch (moments.dtype) {
    case StateDtype::fp32:
        moment_update_kernel<MomentKind::fp32><<<blocks, kThreads>>>(elements, first, last, pointers);
        break;
    case StateDtype::bf16:
        moment_update_kernel<MomentKind::bf16><<<blocks, kThreads>>>(elements, first, last, pointers);
        break;
    case StateDtype::q8:
        moment_update_kernel<MomentKind::q8><<<blocks, kThreads>>>(elements, first, last, pointers);
        break;
    }
    check_launch("moment_update_kernel");
}

__global__ void store_scale_kernel(float* scale, const int* top_code, int qp) {
    *scale = reference_rule_scale(*scale, qp, *top_code);
}

}  // namespace

DeviceMoments::DeviceMoments(const TensorMoments& host) : dtype(host.dtype), count(host.count) {
    require(host.first == 0, "DeviceMoments: the GPU holds whole tensors' moments, not a shard");
    const size_t bytes = host.count * host.element_bytes();
    m = DeviceBuffer(MemCategory::optimizer, bytes);
    v = DeviceBuffer(MemCategory::optimizer, bytes);
    copy_to_device(m.data(), host.m.data(), bytes);
    copy_to_device(v.data(), host.v.data(), bytes);
    if (dtype == StateDtype::q8) {
        m_absmax = to_device(MemCategory::optimizer, host.m_absmax.data(), host.m_absmax.size());
        v_absmax = to_device(MemCategory::optimizer, host.v_absmax.data(), host.v_absmax.size());
    }
    if (host.residual.size() > 0) residual = to_device(MemCategory::optimizer, host.residual.data(), host.residual.size());
    scale_moments[0] = host.scale_moments[0];
    scale_moments[1] = host.scale_moments[1];
}

void DeviceMoments::copy_to(TensorMoments& host) const {
    require(host.first == 0 && host.count == count && host.dtype == dtype, "DeviceMoments: copied to other moments");
    copy_to_host(host.m.data(), m.data(), m.bytes());
    copy_to_host(host.v.data(), v.data(), v.bytes());
    if (dtype == StateDtype::q8) {
        copy_to_host(host.m_absmax.data(), m_absmax.data(), m_absmax.bytes());
        copy_to_host(host.v_absmax.data(), v_absmax.data(), v_absmax.bytes());
    }
    if (residual.size() > 0) copy_to_host(host.residual.data(), residual.data(), residual.bytes());
    host.scale_moments[0] = scale_moments[0];
    host.scale_moments[1] = scale_moments[1];
}

DeviceDqtStep::DeviceDqtStep(const DeviceCodedTensor& tensor, const AdamWConfig& config, float lr, int64_t t,
                             const DqtRounding& rounding)
    : tensor_(tensor),
      k_(dqt_step_constants(tensor.grid, 1.0f, 0, config, lr, t, rounding, tensor.tensor_id)),
      top_code_(MemCategory::scratch, 1) {
    if (k_.learned_scale) {
        dot_parts_ = DeviceArray<long long>(MemCategory::scratch, (tensor.count + kStateBlock - 1) / kStateBlock);
        dot_parts_.zero();
        return;
    }
    const int below_grid = tensor.grid.qn() - 1;  // max_code of an empty tensor
    copy_to_device(top_code_.data(), &below_grid, sizeof below_grid);
    const unsigned threads = 256;
    const unsigned blocks = std::min<unsigned>(1024, std::max(1u, blocks_for(tensor.count, threads)));
    max_code_kernel<<<blocks, threads>>>(tensor.codes, tensor.count, tensor.grid, top_code_.data());
    check_launch("max_code_kernel");
}

void DeviceDqtStep::apply(const float* g, DeviceMoments& moments, size_t first, size_t last) {
    require(k_.residual_steps == 0.0f || moments.residual.size() == moments.count,
            "DeviceDqtStep: the optimizer state holds no sub-grid residuals for tensor " + std::to_string(k_.tensor_id));
    const DqtElements elements{k_,
                               tensor_.codes,
                               tensor_.scale,
                               top_code_.data(),
                               g,
                               first,
                               k_.residual_steps > 0.0f ? moments.residual.data() : nullptr,
                               k_.learned_scale ? dot_parts_.data() : nullptr};
    launch_update(elements, moments, first, last);
}

void DeviceDqtStep::finish(DeviceMoments& moments) {
    if (!k_.learned_scale) {
        store_scale_kernel<<<1, 1>>>(tensor_.scale, top_code_.data(), k_.grid.qp());
        check_launch("store_scale_kernel");
        return;
    }
    std::vector<long long> parts(dot_parts_.size());
    copy_to_host(parts.data(), dot_parts_.data(), parts.size() * sizeof(long long));
    ExactSum dot = 0;
    for (long long part : parts) dot += part;
    DqtStepConstants k = k_;
    copy_to_host(&k.old_scale, tensor_.scale, sizeof(float));
    const float new_scale = learned_scale_after_step(k, moments.scale_moments, exact_sum_value(dot));
    copy_to_device(tensor_.scale, &new_scale, sizeof(float));
}

DeviceAdamWStep::DeviceAdamWStep(const AdamWConfig& config, float lr, int64_t t, bool decay)
    : k_(AdamWStep(config, lr, t, decay).constants()) {}

void DeviceAdamWStep::apply(float* w, const float* g, DeviceMoments& moments, size_t first, size_t last) const {
    launch_update(AdamWElements{k_, w, g, first}, moments, first, last);
}

}  // namespace dqt::cuda
