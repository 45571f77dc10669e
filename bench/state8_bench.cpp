// Chooses the block size of the 8-bit Adam state (src/optim/optimizer_state.h) by measurement:
// takes real fp32 Adam moments from a training checkpoint, quantizes them block-wise with the
// dynamic maps at several block sizes, storing v itself or sqrt(v), and reports the error of
// the moments and of the Adam direction m / (sqrt(v) + eps) they produce, with the bytes the
// block maxima cost and the time per value. Results and the choices: docs/results.md.
//   build/bench_state8 runs/paper/fp/checkpoint.dqt
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "quant/dynamic8.h"

namespace {

struct Errors {
    double m_sq = 0, m_ref = 0, v_sq = 0, v_ref = 0, dir_sq = 0, dir_ref = 0;
    double seconds = 0;
    size_t values = 0;
};

void quantize_roundtrip(std::vector<float>& x, size_t block, const dqt::DynamicMap& map) {
    std::vector<uint8_t> codes(block);
    for (size_t first = 0; first < x.size(); first += block) {
        const size_t n = std::min(block, x.size() - first);
        const float absmax = dqt::quantize_block8(codes.data(), x.data() + first, n, map);
        dqt::dequantize_block8(x.data() + first, codes.data(), n, absmax, map);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: bench_state8 CHECKPOINT (a run trained with --optim-state 32)\n");
        return 2;
    }
    try {
        const dqt::CheckpointReader reader(argv[1]);
        const std::vector<size_t> blocks = {64, 256, 2048, 16384};
        for (const bool store_sqrt_v : {false, true}) {
        std::vector<Errors> errors(blocks.size());
        const double eps = 1e-8;
        for (const std::string& name : reader.names()) {
            if (name.rfind("adam.m.", 0) != 0) continue;
            const std::string tensor = name.substr(7);
            if (reader.dtype(name) != "f32") throw std::runtime_error("checkpoint state is not fp32");
            size_t count = 1;
            for (int64_t extent : reader.shape(name)) count *= static_cast<size_t>(extent);
            if (count < 4096) continue;  // small tensors keep fp32 state
            std::vector<float> m(count), v(count);
            reader.read(name, "f32", reader.shape(name), m.data(), count * 4);
            reader.read("adam.v." + tensor, "f32", reader.shape(name), v.data(), count * 4);
            for (size_t b = 0; b < blocks.size(); ++b) {
                std::vector<float> mq = m, vq = v;
                const auto start = std::chrono::steady_clock::now();
                quantize_roundtrip(mq, blocks[b], dqt::dynamic_map_signed());
                if (store_sqrt_v) {
                    for (float& x : vq) x = std::sqrt(x);
                    quantize_roundtrip(vq, blocks[b], dqt::dynamic_map_unsigned());
                    for (float& x : vq) x = x * x;
                } else {
                    quantize_roundtrip(vq, blocks[b], dqt::dynamic_map_unsigned());
                }
                errors[b].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                errors[b].values += 2 * count;
                for (size_t i = 0; i < count; ++i) {
                    const double dir = m[i] / (std::sqrt(static_cast<double>(v[i])) + eps);
                    const double dir_q = mq[i] / (std::sqrt(static_cast<double>(vq[i])) + eps);
                    errors[b].m_sq += (mq[i] - m[i]) * double(mq[i] - m[i]);
                    errors[b].m_ref += double(m[i]) * m[i];
                    errors[b].v_sq += (vq[i] - v[i]) * double(vq[i] - v[i]);
                    errors[b].v_ref += double(v[i]) * v[i];
                    errors[b].dir_sq += (dir_q - dir) * (dir_q - dir);
                    errors[b].dir_ref += dir * dir;
                }
            }
        }
        std::printf("\nsecond moment stored as %s:\n\n", store_sqrt_v ? "sqrt(v)" : "v");
        std::printf("| block | m rel. error | v rel. error | Adam direction rel. error | absmax bytes/param | ns/value (1 thread) |\n");
        std::printf("|---|---|---|---|---|---|\n");
        for (size_t b = 0; b < blocks.size(); ++b) {
            const Errors& e = errors[b];
            std::printf("| %zu | %.4f | %.4f | %.4f | %.4f | %.1f |\n", blocks[b], std::sqrt(e.m_sq / e.m_ref),
                        std::sqrt(e.v_sq / e.v_ref), std::sqrt(e.dir_sq / e.dir_ref), 8.0 / blocks[b],
                        1e9 * e.seconds / e.values);
        }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_state8: %s\n", e.what());
        return 1;
    }
    return 0;
}
