// Block quantization of data-parallel transfers (data_parallel/wire_quantizer.h): the wire
// bytes against a scalar reference encoder written from the format's description, the exact
// error-feedback identity, bounded rounding error, and non-finite blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "data_parallel/wire_quantizer.h"
#include "test_helpers.h"

namespace dqt {
namespace {

using testing::seed_trace;
using testing::test_seed;

// Values over several decades, with exact zeros and ties, in `count` floats.
std::vector<float> random_values(std::mt19937_64& rng, size_t count) {
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-12, 2), kind(0, 19);
    std::vector<float> values(count);
    for (float& v : values) {
        const int k = kind(rng);
        v = k == 0 ? 0.0f : std::ldexp(mantissa(rng), exponent(rng));
    }
    return values;
}

// The format as docs/data-parallel.md states it, one value at a time: per block of 256, an fp32
// scale absmax / qmax, then q = nearest integer to v / scale (ties to even) clamped to
// [-qmax, qmax], with q = +-1 turned to 0 when |v| < scale / 2; 8 bits one int8 each, 4 bits
// two's-complement nibbles, low nibble first; a partial last block padded with zero codes.
std::vector<uint8_t> reference_encode(const std::vector<float>& v, int bits) {
    const int qmax = bits == 8 ? 127 : 7;
    std::vector<uint8_t> wire;
    for (size_t first = 0; first < v.size(); first += 256) {
        const size_t n = std::min<size_t>(256, v.size() - first);
        float absmax = 0.0f;
        for (size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(v[first + i]));
        const float scale = absmax / static_cast<float>(qmax);
        uint8_t scale_bytes[4];
        std::memcpy(scale_bytes, &scale, 4);
        wire.insert(wire.end(), scale_bytes, scale_bytes + 4);
        std::vector<int> q(256, 0);
        for (size_t i = 0; i < n && scale > 0.0f; ++i) {
            double r = std::nearbyint(static_cast<double>(v[first + i] / scale));
            r = std::min<double>(std::max<double>(r, -qmax), qmax);
            q[i] = static_cast<int>(r);
            if (std::abs(q[i]) == 1 && 2.0f * std::fabs(v[first + i]) < scale) q[i] = 0;
        }
        if (bits == 8) {
            for (int code : q) wire.push_back(static_cast<uint8_t>(static_cast<int8_t>(code)));
        } else {
            for (size_t i = 0; i < 256; i += 2) wire.push_back(static_cast<uint8_t>((q[i] & 15) | ((q[i + 1] & 15) << 4)));
        }
    }
    return wire;
}

TEST(WireQuantizer, BytesMatchTheReferenceEncoderAndSizes) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE(seed_trace(seed));
    std::mt19937_64 rng(seed);
    EXPECT_EQ(wire_bytes(0, 8), 0u);
    EXPECT_EQ(wire_bytes(256, 8), 260u);  // 4x less than fp32, less the scale
    EXPECT_EQ(wire_bytes(256, 4), 132u);
    EXPECT_EQ(wire_bytes(257, 4), 264u);
    for (int bits : {8, 4}) {
        for (size_t count : {size_t{1}, size_t{255}, size_t{256}, size_t{1000}, size_t{4096}}) {
            const std::vector<float> values = random_values(rng, count);
            std::vector<uint8_t> wire(wire_bytes(count, bits));
            encode_difference(values.data(), std::vector<float>(count, 0.0f).data(), count, bits, wire.data());
            EXPECT_EQ(wire, reference_encode(values, bits)) << bits << " bits, " << count << " values";
        }
    }
}

TEST(WireQuantizer, ErrorFeedbackLosesNothing) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE(seed_trace(seed));
    std::mt19937_64 rng(seed);
    for (int bits : {8, 4}) {
        const size_t count = 3 * 256 + 77;
        std::vector<float> residual(count, 0.0f), decoded(count);
        std::vector<double> sent_sum(count, 0.0), true_sum(count, 0.0);
        std::vector<uint8_t> wire(wire_bytes(count, bits));
        for (int step = 0; step < 50; ++step) {
            const std::vector<float> gradient = random_values(rng, count);
            std::vector<float> value(count);  // what this step sends: gradient + residual, in float
            for (size_t i = 0; i < count; ++i) value[i] = gradient[i] + residual[i];
            encode_with_feedback(gradient.data(), residual.data(), count, bits, wire.data());
            decode(wire.data(), count, bits, decoded.data());
            for (size_t i = 0; i < count; ++i) {
                // Exactly: what went out plus what stays is what was to be sent.
                ASSERT_EQ(decoded[i] + residual[i], value[i]) << bits << " bits, step " << step << ", value " << i;
                sent_sum[i] += decoded[i];
                true_sum[i] += gradient[i];
            }
        }
        // Over the steps: everything sent plus the last residual is the sum of the gradients, up
        // to the float rounding of gradient + residual each step (about 1e-7 of the values' scale).
        // |gradient + residual| < 8 here, so each step's rounding is at most 8 x 2^-24.
        const double bound = 50 * 8.0 * std::ldexp(1.0, -24);
        for (size_t i = 0; i < count; ++i) {
            EXPECT_NEAR(sent_sum[i] + residual[i], true_sum[i], bound) << bits << " bits, value " << i;
        }
    }
}

TEST(WireQuantizer, RoundingErrorIsAtMostHalfAStep) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE(seed_trace(seed));
    std::mt19937_64 rng(seed);
    for (int bits : {8, 4}) {
        const size_t count = 4 * 256;
        const std::vector<float> target = random_values(rng, count);
        std::vector<float> copy = random_values(rng, count), before = copy;
        std::vector<uint8_t> wire(wire_bytes(count, bits));
        encode_difference(target.data(), copy.data(), count, bits, wire.data());
        add_decoded(wire.data(), count, bits, copy.data());
        for (size_t block = 0; block < count / 256; ++block) {
            double absmax = 0.0;
            for (size_t i = 0; i < 256; ++i) {
                absmax = std::max(absmax, std::fabs(double(target[block * 256 + i]) - before[block * 256 + i]));
            }
            const double step = absmax / (bits == 8 ? 127 : 7);
            for (size_t i = block * 256; i < (block + 1) * 256; ++i) {
                // Half a step of rounding, plus float rounding of the difference and of the sum.
                const double float_rounding = std::ldexp(std::fabs(target[i]) + std::fabs(before[i]), -22);
                EXPECT_LE(std::fabs(double(target[i]) - copy[i]), 0.5 * step * (1 + 1e-5) + float_rounding)
                    << bits << " bits, value " << i;
            }
        }
    }
}

TEST(WireQuantizer, ANonFiniteValuePoisonsOnlyItsBlock) {
    for (int bits : {8, 4}) {
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
            std::vector<float> values(512, 0.25f), residual(512, 0.0f), decoded(512);
            values[300] = bad;
            std::vector<uint8_t> wire(wire_bytes(512, bits));
            encode_with_feedback(values.data(), residual.data(), 512, bits, wire.data());
            decode(wire.data(), 512, bits, decoded.data());
            for (size_t i = 0; i < 256; ++i) EXPECT_NEAR(decoded[i], 0.25f, 1e-6f) << i;
            for (size_t i = 256; i < 512; ++i) EXPECT_TRUE(std::isnan(decoded[i])) << i;
        }
    }
}

}  // namespace
}  // namespace dqt
