// The safetensors reader (io/safetensors.h): values of every converted dtype, and one clear
// refusal for each way a header can lie about the file.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_helpers.h"

using namespace dqt;
using dqt::testing::TempDir;

namespace {

// u64 header length | header | data, as the format lays it out.
std::string file_bytes(const std::string& header, const std::string& data) {
    std::string bytes(8, '\0');
    const uint64_t length = header.size();
    std::memcpy(bytes.data(), &length, 8);
    return bytes + header + data;
}

std::string write(const TempDir& dir, const std::string& bytes) {
    const std::string path = dir / "model.safetensors";
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
}

template <typename T>
std::string raw(const std::vector<T>& values) {
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// The message of the dqt::Error that opening `bytes` throws ("" when it opens).
std::string refusal(const std::string& bytes) {
    TempDir dir("safetensors");
    try {
        SafetensorsReader reader(write(dir, bytes));
    } catch (const Error& error) {
        return error.what();
    }
    return "";
}

}  // namespace

TEST(Safetensors, ReadsEveryFloatDtypeAsFp32AndI32AsIs) {
    TempDir dir("safetensors");
    const std::string data = raw(std::vector<float>{1.5f, -2.0f}) + raw(std::vector<uint16_t>{0x3F80, 0xC040}) +
                             raw(std::vector<uint16_t>{0x3C00, 0xB800}) + raw(std::vector<double>{0.1, -1e300}) +
                             raw(std::vector<int32_t>{7, -9});
    const std::string header =
        R"({"__metadata__":{"format":"pt"},)"
        R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},)"
        R"("c":{"dtype":"F16","shape":[2],"data_offsets":[12,16]},)"
        R"("d":{"dtype":"F64","shape":[2],"data_offsets":[16,32]},)"
        R"("e":{"dtype":"I32","shape":[2],"data_offsets":[32,40]}})";
    const SafetensorsReader reader(write(dir, file_bytes(header, data)));
    EXPECT_EQ(reader.metadata().at("format"), "pt");
    EXPECT_EQ(reader.names(), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
    EXPECT_EQ(reader.shape("b"), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(reader.read_f32("a"), (std::vector<float>{1.5f, -2.0f}));
    EXPECT_EQ(reader.read_f32("b"), (std::vector<float>{1.0f, -3.0f}));
    EXPECT_EQ(reader.read_f32("c"), (std::vector<float>{1.0f, -0.5f}));
    // Beyond fp32's range an F64 value becomes an infinity (a cast would be undefined).
    EXPECT_EQ(reader.read_f32("d"), (std::vector<float>{0.1f, -std::numeric_limits<float>::infinity()}));
    EXPECT_EQ(reader.read_i32("e"), (std::vector<int32_t>{7, -9}));
    EXPECT_THROW(reader.read_i32("a"), Error);
    EXPECT_THROW(reader.read_f32("e"), Error);
    EXPECT_THROW(reader.read_f32("missing"), Error);
}

TEST(Safetensors, RefusesHeadersThatDoNotDescribeTheFile) {
    const std::string eight = raw(std::vector<float>{1.0f, 2.0f});
    auto one = [](const std::string& entry) { return R"({"w":)" + entry + "}"; };
    struct Case {
        const char* what;
        std::string bytes;
        const char* message;
    };
    const std::vector<Case> cases = {
        {"shorter than the length field", std::string(5, '\0'), "truncated"},
        {"header longer than the file", file_bytes("{}", "").substr(0, 9), "truncated"},
        {"header over the limit", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "over the limit"},
        {"not JSON", file_bytes("{\"w\":", ""), "not a JSON object"},
        {"JSON but not an object", file_bytes("[1,2]", ""), "not a JSON object"},
        {"unknown dtype", file_bytes(one(R"({"dtype":"F7","shape":[2],"data_offsets":[0,8]})"), eight), "unknown dtype"},
        {"negative dimension", file_bytes(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), eight),
         "non-negative"},
        {"shape overflowing", file_bytes(one(R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]})"),
                                         eight), "overflows"},
        {"bytes not matching the shape", file_bytes(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), eight),
         "need 12"},
        {"data past the end", file_bytes(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), eight),
         "outside the file"},
        {"offsets reversed", file_bytes(one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), eight),
         "outside the file"},
        {"a gap before the data", file_bytes(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), eight),
         "overlap or leave a gap"},
        {"bytes after the last tensor", file_bytes(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), eight),
         "cover 4 of the 8"},
        {"two tensors sharing bytes",
         file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    eight),
         "overlap or leave a gap"},
        {"metadata value not a string", file_bytes(R"({"__metadata__":{"n":1}})", ""), "not a string"},
        {"entry without offsets", file_bytes(one(R"({"dtype":"F32","shape":[2]})"), eight), "lacks"},
    };
    for (const Case& c : cases) {
        const std::string message = refusal(c.bytes);
        EXPECT_NE(message.find(c.message), std::string::npos) << c.what << ": got '" << message << "'";
        EXPECT_EQ(message.find('\n'), std::string::npos) << c.what;
    }
}
