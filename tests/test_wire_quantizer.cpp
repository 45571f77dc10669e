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

// The format as wire_quantizer.h states it, one value at a time, in double where that is exact.
// Per block of 256: 8 bits, scale absmax / 127, q = nearest integer to v / scale (ties to even)
// clamped to [-127, 127], +-1 turned to 0 when |v| < scale / 2, one int8 each; 4 bits, scale
// absmax, the nearest of 0 and +-absmax x 2^(k-7) for k = 1..7 (ties up, 0 only up to
// absmax / 128), nibble k plus 8 when negative, low nibble first. A partial last block is padded
// with zero codes.
std::vector<uint8_t> reference_encode(const std::vector<float>& v, int bits) {
    std::vector<uint8_t> wire;
    for (size_t first = 0; first < v.size(); first += 256) {
        const size_t n = std::min<size_t>(256, v.size() - first);
        float absmax = 0.0f;
        for (size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(v[first + i]));
        const float scale = bits == 8 ? absmax / 127.0f : absmax;
        uint8_t scale_bytes[4];
        std::memcpy(scale_bytes, &scale, 4);
        wire.insert(wire.end(), scale_bytes, scale_bytes + 4);
        std::vector<int> code(256, 0);
        for (size_t i = 0; i < n && absmax >= 0x1p-100f; ++i) {
            const float x = v[first + i];
            if (bits == 8) {
                double r = std::nearbyint(static_cast<double>(x / scale));
                r = std::min<double>(std::max<double>(r, -127), 127);
                code[i] = static_cast<int>(r);
                if (std::abs(code[i]) == 1 && 2.0f * std::fabs(x) < scale) code[i] = 0;
            } else if (std::fabs(x) > absmax / 128) {
                // The nearest power of two in [1/64, 1] to the float ratio |x| / absmax.
                const double ratio = std::fabs(x) / absmax;
                int best = 1;
                for (int k = 2; k <= 7; ++k) {
                    if (std::fabs(ratio - std::ldexp(1.0, k - 7)) <= std::fabs(ratio - std::ldexp(1.0, best - 7))) best = k;
                }
                code[i] = best + (x < 0 ? 8 : 0);
            }
        }
        if (bits == 8) {
            for (int c : code) wire.push_back(static_cast<uint8_t>(static_cast<int8_t>(c)));
        } else {
            for (size_t i = 0; i < 256; i += 2) wire.push_back(static_cast<uint8_t>(code[i] | (code[i + 1] << 4)));
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

// How far one encoded difference can land from its target: at 8 bits half a step (absmax / 254);
// at 4 bits a third of the difference (the nearest power of two), or absmax / 128 for the
// differences sent as 0.
TEST(WireQuantizer, RoundingErrorIsBoundedByTheFormat) {
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
            for (size_t i = block * 256; i < (block + 1) * 256; ++i) {
                const double difference = std::fabs(double(target[i]) - before[i]);
                const double bound = bits == 8 ? absmax / 254 : std::max(difference / 3, absmax / 128);
                // Plus float rounding of the difference and of the sum.
                const double float_rounding = std::ldexp(std::fabs(target[i]) + std::fabs(before[i]), -22);
                EXPECT_LE(std::fabs(double(target[i]) - copy[i]), bound * (1 + 1e-5) + float_rounding)
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
