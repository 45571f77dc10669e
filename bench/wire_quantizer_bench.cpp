// Speed of the block quantizer of compressed data-parallel transfers
// (data_parallel/wire_quantizer.h) beside this machine's memory bandwidth, measured in the same
// process: a streaming pass over the same arrays (out += in) is the limit. Results in
// docs/data-parallel.md ("What compression costs").
//
//   build/bench_wire_quantizer [values (default 16M)]
//
// Each figure is the best of 7 repetitions (the machine is shared). Traffic per value: encode
// with feedback reads value and residual, writes residual and wire (12 B + wire); decode reads
// wire and writes 4 B (plus the write-allocate read of `out`, not counted); add_decoded reads
// wire and reads and writes 4 B.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "data_parallel/wire_quantizer.h"

namespace {

double best_seconds(const std::function<void()>& body) {
    double best = 1e30;
    for (int repetition = 0; repetition < 7; ++repetition) {
        const auto start = std::chrono::steady_clock::now();
        body();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    const size_t count = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{16} << 20;
    if (count == 0 || count > (size_t{1} << 30)) {
        std::fprintf(stderr, "bench_wire_quantizer: values must be in 1 .. 2^30\n");
        return 2;
    }
    std::vector<float> values(count), residual(count, 0.0f), out(count);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1e-3f);
    for (float& v : values) v = normal(rng);
    std::printf("%zu values (%.0f MB of fp32)\n", count, count * 4 / 1e6);
    std::printf("| threads | pass | bits | values/s | GB/s moved | of the limit |\n|---|---|---|---|---|---|\n");
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        // The limit: out += values, in parallel like the passes (reads 8 B and writes 4 B per value;
        // it reads what it writes, so no write-allocate traffic goes uncounted, as in add_decoded).
        const double stream_seconds = best_seconds([&] {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < count; ++i) out[i] += values[i];
        });
        const double stream_rate = 12.0 * count / stream_seconds;
        std::printf("| %d | out += in (limit) | - | %.2e | %.1f | 1.00 |\n", threads, count / stream_seconds,
                    stream_rate / 1e9);
        for (int bits : {8, 4}) {
            const size_t wire = dqt::wire_bytes(count, bits);
            std::vector<uint8_t> bytes(wire);
            const double per_value_wire = static_cast<double>(wire) / count;
            struct Pass {
                const char* name;
                double bytes_per_value;
                std::function<void()> body;
            };
            const Pass passes[] = {
                {"encode with feedback", 12 + per_value_wire,
                 [&] { dqt::encode_with_feedback(values.data(), residual.data(), count, bits, bytes.data()); }},
                {"decode", 4 + per_value_wire, [&] { dqt::decode(bytes.data(), count, bits, out.data()); }},
                {"add decoded", 8 + per_value_wire, [&] { dqt::add_decoded(bytes.data(), count, bits, out.data()); }},
            };
            for (const Pass& pass : passes) {
                const double seconds = best_seconds(pass.body);
                const double rate = pass.bytes_per_value * count / seconds;
                std::printf("| %d | %s | %d | %.2e | %.1f | %.2f |\n", threads, pass.name, bits, count / seconds,
                            rate / 1e9, rate / stream_rate);
            }
        }
    }
    return 0;
}
