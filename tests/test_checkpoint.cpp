#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "core/checksum.h"
#include "core/error.h"
#include "core/memory.h"
#include "io/atomic_file.h"
#include "io/background_checkpoint.h"
#include "io/checkpoint.h"
#include "test_helpers.h"

using namespace dqt;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Message of the dqt::Error that f throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& error) {
        return error.what();
    }
    return "";
}

#define EXPECT_ERROR_CONTAINS(statement, text)                                  \
    do {                                                                        \
        const std::string message_ = error_of([&] { statement; });              \
        EXPECT_NE(message_.find(text), std::string::npos)                       \
            << "expected an error containing \"" << (text) << "\", got \"" << message_ << "\""; \
    } while (0)

// A fresh empty directory per test, removed afterwards.
class IoDir : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() /
               ("dqt_io_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string file(const std::string& name) const { return (dir_ / name).string(); }
    std::vector<std::string> listing() const {
        std::vector<std::string> names;
        for (const auto& item : fs::directory_iterator(dir_)) names.push_back(item.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
    fs::path dir_;
};

using IoAtomicFile = IoDir;
using CheckpointFile = IoDir;

// Several dtypes and shapes, including a scalar, an empty tensor and odd byte counts so
// that payloads need padding; floats include NaN and -0 to check bit-exactness.
struct Sample {
    std::vector<float> weights{1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(), 3e-38f, 7.0f, -2.25f};
    std::vector<int8_t> codes{-1, 0, 1, 1, -1, 0, 1};
    std::vector<uint16_t> halves{0x3f80, 0x7fc1, 0x0001};
    std::vector<int32_t> step{123456789};
    std::vector<uint8_t> empty;
    std::vector<double> moments{1.0 / 3.0, -1e300};
    json meta = {{"config", {{"dim", 256}, {"layers", {1, 2, 3}}, {"theta", 10000.0}}},
                 {"step", 1234},
                 {"lr", 3e-4},
                 {"name", "run \u00fc"},
                 {"flags", {{"resume", true}, {"note", nullptr}}}};

    std::vector<TensorView> views() const {
        return {
            {"tok_embeddings", "f32", {2, 3}, weights.data(), weights.size() * sizeof(float)},
            {"blk.0.attn_q.codes", "i8", {7}, codes.data(), codes.size()},
            {"norm.bf16", "bf16", {3}, halves.data(), halves.size() * sizeof(uint16_t)},
            {"step", "i32", {}, step.data(), sizeof(int32_t)},
            {"empty", "u8", {0, 4}, nullptr, 0},
            {"adam.m", "f64", {1, 2}, moments.data(), moments.size() * sizeof(double)},
        };
    }
};

std::string slurp(const std::string& path) { return read_file(path); }

// Plain write without fsync, into a fresh inode: ext4 flushes a file truncated and rewritten
// in place on close, which would make the tests that write hundreds of variants slow.
void overwrite(const std::string& path, const std::string& bytes) {
    fs::remove(path);
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with valid framing and checksum around an arbitrary header, to reach the checks
// behind the checksum.
std::string framed(const std::string& header, const std::string& payload = "") {
    std::string bytes("DQTCKPT\0", 8);
    const uint32_t version = 1;
    const uint64_t length = header.size();
    bytes.append(reinterpret_cast<const char*>(&version), 4);  // the test host is little endian
    bytes.append(reinterpret_cast<const char*>(&length), 8);
    bytes += header;
    bytes += payload;
    const uint32_t crc = crc32_update(0, bytes.data(), bytes.size());
    bytes.append(reinterpret_cast<const char*>(&crc), 4);
    bytes.append("DQTEND\0\0", 8);
    return bytes;
}

}  // namespace

TEST_F(CheckpointFile, RoundTripIsBitExact) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.bin"});

    const CheckpointReader reader(path);
    EXPECT_EQ(reader.meta(), sample.meta);
    EXPECT_EQ(reader.names(), (std::vector<std::string>{"tok_embeddings", "blk.0.attn_q.codes", "norm.bf16", "step",
                                                        "empty", "adam.m"}));
    EXPECT_TRUE(reader.has("step"));
    EXPECT_FALSE(reader.has("missing"));
    EXPECT_EQ(reader.shape("empty"), (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(reader.dtype("norm.bf16"), "bf16");
    EXPECT_EQ(reader.shape("step"), std::vector<int64_t>{});

    for (const TensorView& view : sample.views()) {
        std::vector<char> out(view.nbytes + 1, 'x');
        reader.read(view.name, view.dtype, view.shape, out.data(), view.nbytes);
        if (view.nbytes > 0) {
            EXPECT_EQ(std::memcmp(out.data(), view.data, view.nbytes), 0) << view.name;
        }
        EXPECT_EQ(out[view.nbytes], 'x') << view.name;
    }
}

TEST_F(CheckpointFile, EmptyCheckpointRoundTrips) {
    const std::string path = file("empty.bin");
    save_checkpoint(path, json::object(), {});
    const CheckpointReader reader(path);
    EXPECT_EQ(reader.meta(), json::object());
    EXPECT_TRUE(reader.names().empty());
}

TEST_F(CheckpointFile, LayoutMatchesTheDocumentedFormat) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    const std::string bytes = slurp(path);

    ASSERT_GT(bytes.size(), 32u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("DQTCKPT\0", 8));
    uint32_t version = 0;
    uint64_t header_bytes = 0;
    std::memcpy(&version, bytes.data() + 8, 4);
    std::memcpy(&header_bytes, bytes.data() + 12, 8);
    EXPECT_EQ(version, 1u);
    const json header = json::parse(bytes.substr(20, header_bytes));
    EXPECT_EQ(header.at("meta"), sample.meta);
    ASSERT_EQ(header.at("tensors").size(), 6u);
    for (const json& entry : header.at("tensors")) {
        const uint64_t offset = entry.at("offset");
        const uint64_t nbytes = entry.at("nbytes");
        EXPECT_EQ(offset % 64, 0u);
        EXPECT_GE(offset, 20 + header_bytes);
        EXPECT_EQ(entry.at("crc32").get<uint32_t>(), crc32_update(0, bytes.data() + offset, nbytes));
    }
    EXPECT_EQ(header.at("tensors")[1].at("dtype"), "i8");
    EXPECT_EQ(header.at("tensors")[1].at("shape"), json::array({7}));
    uint32_t crc = 0;
    std::memcpy(&crc, bytes.data() + bytes.size() - 12, 4);
    EXPECT_EQ(crc, crc32_update(0, bytes.data(), bytes.size() - 12));
    EXPECT_EQ(bytes.substr(bytes.size() - 8), std::string("DQTEND\0\0", 8));
}

TEST_F(CheckpointFile, WrongMagicIsRejected) {
    const std::string path = file("other.bin");
    write_file_atomic(path, "GGUF this is some other format entirely");
    EXPECT_ERROR_CONTAINS(CheckpointReader{path}, "checkpoint " + path + ": not a dqt checkpoint");
}

TEST_F(CheckpointFile, TruncationAtAnyLengthIsReportedAsTruncated) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    const std::string full = slurp(path);
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, full.data() + 12, 8);
    // Covers: inside the magic, the prefix, the header, the padding, payloads and trailer.
    ASSERT_LT(20 + header_bytes + 64, full.size());
    const std::string cut = file("cut.bin");
    for (size_t length = 0; length < full.size(); ++length) {
        overwrite(cut, full.substr(0, length));
        EXPECT_ERROR_CONTAINS(CheckpointReader{cut}, "truncated");
    }
}

TEST_F(CheckpointFile, FlippedPayloadByteIsChecksumError) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    std::string bytes = slurp(path);
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data() + 12, 8);
    bytes[(20 + header_bytes + 63) / 64 * 64] ^= 0x10;  // first byte of the first payload
    overwrite(path, bytes);
    EXPECT_ERROR_CONTAINS(CheckpointReader{path}, "checksum mismatch: file is corrupt");
}

TEST_F(CheckpointFile, FlippedHeaderByteIsError) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    std::string bytes = slurp(path);
    bytes[30] ^= 0x01;
    overwrite(path, bytes);
    EXPECT_ERROR_CONTAINS(CheckpointReader{path}, "checksum mismatch: file is corrupt");
}

TEST_F(CheckpointFile, EverySingleByteCorruptionIsDetected) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    const std::string full = slurp(path);
    const std::string bad = file("bad.bin");
    for (size_t i = 0; i < full.size(); ++i) {
        std::string bytes = full;
        bytes[i] ^= 0xA5;
        overwrite(bad, bytes);
        EXPECT_ERROR_CONTAINS(CheckpointReader{bad}, "checkpoint " + bad + ": ");
    }
}

TEST_F(CheckpointFile, NewerVersionAsksForUpgrade) {
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, {{"step", 1}}, {});
    std::string bytes = slurp(path);
    bytes[8] = 2;
    overwrite(path, bytes);
    EXPECT_ERROR_CONTAINS(CheckpointReader{path}, "written by a newer dqt (format version 2");
}

TEST_F(CheckpointFile, MalformedHeaderBehindValidChecksumIsRejected) {
    const std::string path = file("crafted.bin");
    overwrite(path, framed("{\"meta\": {"));
    EXPECT_ERROR_CONTAINS(CheckpointReader{path}, "checkpoint " + path + ": header is not valid JSON");

    overwrite(path, framed("[1,2]"));
    EXPECT_ERROR_CONTAINS(CheckpointReader{path}, "lacks \"meta\" or \"tensors\"");

    // One f32 tensor of zeros at offset 512; each case breaks one field of its entry.
    const char zeros[4] = {};
    const json good = {{"name", "t"}, {"dtype", "f32"}, {"shape", {1}}, {"offset", 512}, {"nbytes", 4},
                       {"crc32", crc32_update(0, zeros, 4)}};
    auto write_with_entry = [&](const json& entry) {
        const std::string header = json{{"meta", {{"k", 1}}}, {"tensors", {entry}}}.dump();
        ASSERT_LT(20 + header.size(), 512u);
        overwrite(path, framed(header, std::string(512 - 20 - header.size() + 4, '\0')));
    };
    auto with = [&](const char* key, const json& value) {
        json entry = good;
        entry[key] = value;
        return entry;
    };
    write_with_entry(good);
    EXPECT_EQ(CheckpointReader(path).shape("t"), std::vector<int64_t>{1});

    const std::vector<std::pair<json, std::string>> cases = {
        {with("offset", 1u << 30), "outside the data area"},
        {with("offset", std::numeric_limits<uint64_t>::max() - 63), "outside the data area"},
        {with("offset", 0), "outside the data area"},
        {with("offset", 513), "outside the data area"},
        {with("nbytes", 8), "does not match its shape"},
        {with("shape", {uint64_t{1} << 62, 16}), "does not match its shape"},
        {with("shape", {-1}), "shape is not a list"},
        {with("dtype", "q3_k"), "unknown dtype 'q3_k'"},
        {with("name", 7), "wrong type"},
        {json{{"name", "t"}}, "lacks \"dtype\""},
    };
    for (const auto& [entry, expected] : cases) {
        write_with_entry(entry);
        EXPECT_ERROR_CONTAINS(CheckpointReader{path}, expected);
    }
    // A tensor's own checksum is checked when it is read (the reader holds no payload).
    write_with_entry(with("crc32", 12345));
    const CheckpointReader reader(path);
    float value = 0.0f;
    EXPECT_ERROR_CONTAINS(reader.read("t", "f32", {1}, &value, sizeof value), "tensor t: checksum mismatch");
}

TEST_F(CheckpointFile, MissingFileIsNamed) {
    const std::string path = file("nope.bin");
    EXPECT_ERROR_CONTAINS(CheckpointReader{path},
                          "cannot open checkpoint file " + path + ": No such file or directory");
}

TEST_F(CheckpointFile, SaveIntoMissingDirectoryFailsCleanly) {
    const std::string path = file("no/such/dir/ckpt.bin");
    const Sample sample;
    EXPECT_ERROR_CONTAINS(save_checkpoint(path, sample.meta, sample.views()), "cannot write " + path);
    EXPECT_TRUE(listing().empty());
}

TEST_F(CheckpointFile, InvalidTensorsAreRejectedBeforeWriting) {
    const std::string path = file("ckpt.bin");
    const float value = 1.0f;
    const TensorView one{"w", "f32", {1}, &value, 4};
    EXPECT_ERROR_CONTAINS(save_checkpoint(path, {}, {one, one}), "duplicate tensor name w");
    EXPECT_ERROR_CONTAINS(save_checkpoint(path, {}, {{"w", "f33", {1}, &value, 4}}), "unknown dtype 'f33'");
    EXPECT_ERROR_CONTAINS(save_checkpoint(path, {}, {{"w", "f32", {2}, &value, 4}}), "does not match its shape");
    EXPECT_ERROR_CONTAINS(save_checkpoint(path, {}, {{"", "f32", {1}, &value, 4}}), "empty name");
    EXPECT_TRUE(listing().empty());
}

TEST_F(CheckpointFile, FailedOverwriteKeepsTheOldCheckpoint) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    const std::string before = slurp(path);
    {
        AtomicFileWriter writer(path);
        writer.write("half a checkpoint", 17);
    }  // destroyed without commit: as if the process failed midway
    const float value = 1.0f;
    EXPECT_ERROR_CONTAINS(save_checkpoint(path, {}, {{"w", "f32", {1}, &value, 4}, {"w", "f32", {1}, &value, 4}}),
                          "duplicate");
    EXPECT_EQ(slurp(path), before);
    EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.bin"});
    EXPECT_EQ(CheckpointReader(path).meta(), sample.meta);
}

// A write error injected at the file layer: with RLIMIT_FSIZE below the checkpoint's size the
// kernel refuses the write itself (EFBIG, as a full disk refuses with ENOSPC). The error names the
// call's own errno, the old checkpoint stays whole, and no temporary file is left.
TEST_F(CheckpointFile, AWriteRefusedByTheFileLayerKeepsTheOldCheckpoint) {
    const Sample sample;
    const std::string path = file("ckpt.bin");
    save_checkpoint(path, sample.meta, sample.views());
    const std::string before = slurp(path);
    nlohmann::json changed_meta = sample.meta;
    changed_meta["note"] = "the second save";

    struct rlimit saved {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG
    struct rlimit limited = saved;
    limited.rlim_cur = before.size() / 2;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    std::string error;
    try {
        save_checkpoint(path, changed_meta, sample.views());
    } catch (const Error& e) {
        error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous_handler);

    EXPECT_NE(error.find("File too large"), std::string::npos) << "error: '" << error << "'";
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    EXPECT_EQ(slurp(path), before);
    EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.bin"});
}

TEST_F(CheckpointFile, MismatchedTensorsNameTheTensorAndBothShapes) {
    const std::string path = file("ckpt.bin");
    std::vector<float> q(256 * 256, 0.5f);
    save_checkpoint(path, {}, {{"blk.0.attn_q", "f32", {256, 256}, q.data(), q.size() * sizeof(float)}});
    const CheckpointReader reader(path);
    std::vector<float> out(512 * 512);
    EXPECT_ERROR_CONTAINS(reader.read("blk.0.attn_q", "f32", {512, 512}, out.data(), out.size() * sizeof(float)),
                          "checkpoint " + path +
                              ": tensor blk.0.attn_q has shape [256,256], this model expects [512,512] (config mismatch)");
    EXPECT_ERROR_CONTAINS(reader.read("blk.0.attn_q", "i8", {256, 256}, out.data(), 256 * 256),
                          "tensor blk.0.attn_q has dtype f32, this model expects i8 (config mismatch)");
    EXPECT_ERROR_CONTAINS(reader.read("blk.1.attn_q", "f32", {256, 256}, out.data(), q.size() * sizeof(float)),
                          "checkpoint " + path + ": no tensor named blk.1.attn_q");
    EXPECT_ERROR_CONTAINS(reader.shape("blk.1.attn_q"), "no tensor named blk.1.attn_q");
    EXPECT_ERROR_CONTAINS(reader.read("blk.0.attn_q", "f32", {256, 256}, out.data(), 100), "destination buffer");
}

TEST_F(IoAtomicFile, DestroyedWithoutCommitLeavesNothing) {
    const std::string path = file("out.bin");
    {
        AtomicFileWriter writer(path);
        writer.write("abc", 3);
        EXPECT_TRUE(fs::exists(writer.temp_path()));
        EXPECT_FALSE(fs::exists(path));
    }
    EXPECT_TRUE(listing().empty());
}

// Refused at once, not after a whole model's bytes (export wrote them, then the rename failed).
TEST_F(IoAtomicFile, ADirectoryIsRefusedAtOpenAndAtCommit) {
    fs::create_directory(file("folder"));
    EXPECT_ERROR_CONTAINS(AtomicFileWriter writer(file("folder")), "folder: it is a directory: give a file name");
    EXPECT_EQ(listing(), std::vector<std::string>{"folder"});
    // One made after the writer opened: the failed rename names its own error (it printed
    // "Success": errno read before the call) and leaves no temporary file.
    {
        AtomicFileWriter writer(file("late"));
        writer.write("abc", 3);
        fs::create_directory(file("late"));
        EXPECT_ERROR_CONTAINS(writer.commit(), "failed: Is a directory");
    }
    EXPECT_EQ(listing(), (std::vector<std::string>{"folder", "late"}));
}

TEST_F(IoAtomicFile, CommitReplacesTheTargetAndLeavesNoTemporary) {
    const std::string path = file("out.txt");
    write_file_atomic(path, "old");
    AtomicFileWriter writer(path);
    writer.write("new ", 4);
    writer.write("contents", 8);
    EXPECT_EQ(read_file(path), "old");  // untouched until commit
    writer.commit();
    EXPECT_EQ(read_file(path), "new contents");
    EXPECT_EQ(listing(), std::vector<std::string>{"out.txt"});
    EXPECT_ERROR_CONTAINS(writer.write("x", 1), "already committed");
}

// A writer killed mid-write leaves "<path>.tmp.<pid>"; the next write of the path removes it,
// but not the temporary file of a writer that is still alive, nor other files.
TEST_F(IoAtomicFile, TheNextWriteRemovesTheLeftoversOfDeadWriters) {
    const std::string path = file("checkpoint.dqt");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);  // child's pid is now a process that is gone
    const std::string dead = path + ".tmp." + std::to_string(child);
    const std::string alive = path + ".tmp." + std::to_string(::getppid());
    const std::string other = file("checkpoint.dqt.tmp.notes");
    for (const std::string& leftover : {dead, alive, other}) std::ofstream(leftover) << "partial";
    write_file_atomic(path, "new");
    EXPECT_EQ(read_file(path), "new");
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(alive));
    EXPECT_TRUE(fs::exists(other));
}

TEST_F(IoAtomicFile, ReadFileErrorsNameThePath) {
    const std::string path = file("missing.txt");
    EXPECT_ERROR_CONTAINS(read_file(path), "cannot open file " + path + ": No such file or directory");
    EXPECT_ERROR_CONTAINS(read_file(dir_.string()), "cannot read file " + dir_.string() + ": Is a directory");
    write_file_atomic(path, "");
    EXPECT_EQ(read_file(path), "");
    // A device has no size to bound the read: /dev/zero as a corpus or tokenizer file grew
    // memory without end.
    EXPECT_ERROR_CONTAINS(read_file("/dev/zero"), "cannot read file /dev/zero: not a regular file");
}

using BackgroundCheckpoint = IoDir;

// The background write copies the tensors before write() returns: the file holds the bytes a
// synchronous save made at that moment, whatever the caller changes afterwards, and the
// reused copy of a second write holds the second state.
TEST_F(BackgroundCheckpoint, WritesTheBytesOfASynchronousSaveWhateverChangesAfterwards) {
    Sample sample;
    save_checkpoint(file("sync-1.bin"), sample.meta, sample.views());
    BackgroundCheckpointWriter writer;
    writer.reserve(sample.views());  // allocated on the writer's thread; write() waits for it
    writer.write(file("background-1.bin"), sample.meta, sample.views());
    sample.weights[0] = 99.0f;  // training goes on while the thread writes
    sample.codes[3] = -1;
    sample.meta["step"] = 1235;
    writer.wait();
    EXPECT_EQ(slurp(file("background-1.bin")), slurp(file("sync-1.bin")));

    writer.write(file("background-2.bin"), sample.meta, sample.views());
    save_checkpoint(file("sync-2.bin"), sample.meta, sample.views());
    writer.wait();
    EXPECT_EQ(slurp(file("background-2.bin")), slurp(file("sync-2.bin")));
    EXPECT_NE(slurp(file("background-2.bin")), slurp(file("background-1.bin")));
    // One copy, accounted: the tensors' bytes at 64-byte aligned offsets.
    EXPECT_GE(writer.snapshot_bytes(), sample.weights.size() * sizeof(float) + sample.codes.size());
    EXPECT_EQ(memory_live_bytes(MemCategory::snapshot), static_cast<int64_t>(writer.snapshot_bytes()));
}

TEST_F(BackgroundCheckpoint, AFailedWriteIsThrownByTheNextWaitAndLeavesNoFile) {
    const Sample sample;
    BackgroundCheckpointWriter writer;
    const std::string unwritable = file("no-such-folder/ckpt.bin");
    writer.write(unwritable, sample.meta, sample.views());
    EXPECT_ERROR_CONTAINS(writer.wait(), unwritable);
    EXPECT_TRUE(listing().empty());
    // The writer works again after a failure.
    writer.write(file("ckpt.bin"), sample.meta, sample.views());
    writer.wait();
    EXPECT_EQ(CheckpointReader(file("ckpt.bin")).meta(), sample.meta);
}

// PageCache::bypass stages bytes into 4 KiB-aligned blocks for O_DIRECT and writes the tail
// through the cache: the file must hold exactly the bytes the buffered writer writes, for
// pieces of every size, including a total that is not a whole number of blocks.
TEST_F(IoAtomicFile, BypassingThePageCacheWritesTheSameBytes) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937_64 rng(seed);
    for (const size_t total : {size_t{0}, size_t{1}, size_t{4096}, size_t{(8u << 20) + 4097}, size_t{21'000'003}}) {
        std::string bytes(total, '\0');
        for (char& byte : bytes) byte = static_cast<char>(rng());
        AtomicFileWriter cached(file("cached.bin"), PageCache::use);
        AtomicFileWriter direct(file("direct.bin"), PageCache::bypass);
        for (size_t at = 0; at < total;) {
            const size_t piece = std::min<size_t>(total - at, 1 + rng() % (3u << 20));
            cached.write(bytes.data() + at, piece);
            direct.write(bytes.data() + at, piece);
            at += piece;
        }
        cached.commit();
        direct.commit();
        EXPECT_TRUE(slurp(file("direct.bin")) == bytes) << total << " bytes";
        EXPECT_TRUE(slurp(file("cached.bin")) == bytes) << total << " bytes";
        EXPECT_EQ(listing(), (std::vector<std::string>{"cached.bin", "direct.bin"}));
    }
}
