// `dqt serve`: stop strings, the engine's slots and queue, and the HTTP API as a client sees
// it. A request must give exactly the tokens `dqt generate` (generate_text) gives for the same
// prompt and options, whether it runs alone or beside seven others.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "infer/generate.h"
#include "infer/generation.h"
#include "model/initialization.h"
#include "model/parameters.h"
#include "serve/api.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "test_helpers.h"

using namespace dqt;
using nlohmann::json;

namespace {

// A random ternary dqt model over bytes: its text is noise, but noise that the engine and
// generate_text must reproduce identically.
struct TestModel {
    std::unique_ptr<Tokenizer> tokenizer = make_byte_tokenizer();
    std::unique_ptr<InferenceModel> model;
    explicit TestModel(int seq_len) {
        ModelConfig c;
        c.dim = 32;
        c.n_layers = 2;
        c.n_heads = 4;
        c.n_kv_heads = 2;
        c.ffn_dim = 48;
        c.vocab_size = 256;
        c.seq_len = seq_len;
        c.init_std = 0.2f;
        MethodConfig m;
        m.kind = Method::dqt;
        ModelParameters parameters(c, m);
        initialize_parameters(parameters, 11);
        model = std::make_unique<InferenceModel>(parameters);
    }
};

const TestModel& test_model() {
    static const TestModel model(64);
    return model;
}

SamplingOptions sampling(float temperature, uint64_t seed) {
    SamplingOptions s;
    s.temperature = temperature;
    s.seed = seed;
    return s;
}

GenerationRequest request(const std::string& prompt, int max_tokens, const SamplingOptions& s,
                          std::vector<std::string> stop = {}) {
    GenerationRequest r;
    r.prompt = test_model().tokenizer->encode(prompt);
    r.max_tokens = max_tokens;
    r.sampling = s;
    r.stop = std::move(stop);
    return r;
}

// Everything a stream delivers, to its end.
std::pair<std::string, StreamUpdate> drain(RequestStream& stream) {
    std::string text;
    StreamUpdate update;
    for (;;) {
        if (!stream.next(update, std::chrono::milliseconds(20000))) ADD_FAILURE() << "the stream stalled";
        text += update.text;
        if (update.done) return {text, update};
    }
}

}  // namespace

TEST(Serve, StopStringsEndTheTextBeforeThemAndAreNeverShown) {
    const TestModel& m = test_model();
    const GenerationResult free_run =
        generate_text(*m.model, *m.tokenizer, SpecialTokens{}, "Stop here", 40, sampling(1.0f, 5), KvCacheType::f32);
    ASSERT_EQ(free_run.generated_tokens, 40);
    // A stop string from the middle of the text the run made: the text ends just before its
    // first occurrence, and no piece ever showed a byte of it.
    const std::string stop = free_run.text.substr(20, 3);
    const size_t first = free_run.text.find(stop);
    InferenceSession session(*m.model, 64);
    Generation generation(session, *m.tokenizer, m.tokenizer->encode("Stop here"), 40, sampling(1.0f, 5), {stop, "\x01\x02\x03\x04"});
    std::string shown;
    while (!generation.finished()) shown += generation.step();
    EXPECT_EQ(generation.reason(), FinishReason::stop);
    EXPECT_EQ(generation.text(), free_run.text.substr(0, first));
    EXPECT_EQ(shown, generation.text());
    EXPECT_LT(generation.generated_tokens(), 40);
    EXPECT_THROW(Generation(session, *m.tokenizer, {1, 2}, 4, sampling(0, 1), {""}), Error);
    // A prompt run in chunks: sampling waits for all of it; no chunk is empty or past its end.
    Generation chunked(session, *m.tokenizer, {1, 2, 3}, 4, sampling(0, 1));
    EXPECT_THROW(chunked.sample(), Error);
    EXPECT_THROW(chunked.run_prompt_chunk(0), Error);
    chunked.run_prompt_chunk(2);
    EXPECT_FALSE(chunked.prompt_ready());
    chunked.run_prompt_chunk(2);
    EXPECT_TRUE(chunked.prompt_ready());
    EXPECT_EQ(session.position(), 3);
    EXPECT_THROW(chunked.run_prompt_chunk(1), Error);
}

// A sampled end-of-generation token (data/special_tokens.h: a model's EOS) ends the generation
// with reason stop; its text is not shown. BOS goes before the prompt where the model asks.
TEST(Serve, AnEndOfGenerationTokenEndsTheTextUnshown) {
    const TestModel& m = test_model();
    const GenerationResult free_run =
        generate_text(*m.model, *m.tokenizer, SpecialTokens{}, "The union", 6, sampling(0.0f, 1), KvCacheType::f32);
    ASSERT_EQ(free_run.generated_tokens, 6);
    InferenceSession session(*m.model, 64);
    std::vector<int32_t> greedy;
    {
        Generation free(session, *m.tokenizer, m.tokenizer->encode("The union"), 6, sampling(0.0f, 1));
        while (!free.finished()) free.step();
        greedy = free.generated();
    }
    SpecialTokens special;
    special.end_of_generation = {greedy[3]};
    const GenerationResult ended =
        generate_text(*m.model, *m.tokenizer, special, "The union", 6, sampling(0.0f, 1), KvCacheType::f32);
    const size_t first = static_cast<size_t>(std::find(greedy.begin(), greedy.end(), greedy[3]) - greedy.begin());
    EXPECT_EQ(ended.finish_reason, FinishReason::stop);
    EXPECT_EQ(ended.generated_tokens, static_cast<int>(first) + 1);
    EXPECT_EQ(ended.text, m.tokenizer->decode(std::vector<int32_t>(greedy.begin(), greedy.begin() + first)));

    special.bos = greedy[0];
    special.add_bos = true;
    EXPECT_EQ(special.prompt(*m.tokenizer, "ab"), (std::vector<int32_t>{greedy[0], 'a', 'b'}));
    EXPECT_EQ(special.prompt(*m.tokenizer, ""), std::vector<int32_t>{});
    const GenerationResult with_bos =
        generate_text(*m.model, *m.tokenizer, special, "The union", 6, sampling(0.0f, 1), KvCacheType::f32);
    EXPECT_EQ(with_bos.prompt_tokens, free_run.prompt_tokens + 1);
}

TEST(Serve, ARequestGivesTheTokensOfGenerateAloneAndBesideSevenOthers) {
    const TestModel& m = test_model();
    Engine engine(*m.model, *m.tokenizer, EngineOptions{8, 8, 0, KvCacheType::f32});
    const std::vector<std::string> prompts = {"The state", "of the", "Union is", "strong",
                                              "We hold", "these truths", "to be self", "evident"};
    std::vector<GenerationResult> expected;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const SamplingOptions s = sampling(i % 2 == 0 ? 0.0f : 0.9f, 100 + i);  // greedy and sampled
        expected.push_back(generate_text(*m.model, *m.tokenizer, SpecialTokens{}, prompts[i], 12 + static_cast<int>(i),
                                         s, KvCacheType::f32));
    }
    // Alone.
    auto alone = engine.submit(request(prompts[0], 12, sampling(0.0f, 100)));
    ASSERT_TRUE(alone);
    const auto [alone_text, alone_end] = drain(*alone);
    EXPECT_EQ(alone_text, expected[0].text);
    EXPECT_EQ(alone_end.completion_tokens, 12);
    EXPECT_EQ(alone_end.prompt_tokens, expected[0].prompt_tokens);
    // Eight at once, interleaved token by token in the engine.
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
        streams.push_back(engine.submit(
            request(prompts[i], 12 + static_cast<int>(i), sampling(i % 2 == 0 ? 0.0f : 0.9f, 100 + i))));
        ASSERT_TRUE(streams.back());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto [text, end] = drain(*streams[i]);
        EXPECT_EQ(text, expected[i].text) << prompts[i];
        EXPECT_EQ(end.reason, FinishReason::length);
    }
}

// A new request's prompt runs a chunk a step, each step beside the live sequences' tokens:
// a long prompt delays them by a chunk, not by the whole prompt. What each step ran comes from
// the engine's step report.
TEST(Serve, ALongPromptRunsInChunksBesideTheLiveSequencesTokens) {
    const TestModel m(4096);
    std::mutex mutex;
    std::condition_variable stepped;
    std::vector<EngineStep> steps;
    EngineOptions options{2, 2, 0, KvCacheType::f32};
    options.prompt_chunk = 4;
    options.on_step = [&](const EngineStep& step) {
        std::lock_guard<std::mutex> lock(mutex);
        steps.push_back(step);
        stepped.notify_all();
    };
    Engine engine(*m.model, *m.tokenizer, options);
    GenerationRequest live;
    live.prompt = {65};
    live.max_tokens = 4000;  // outlasts the test; cancelled at its end
    auto live_stream = engine.submit(live);
    ASSERT_TRUE(live_stream);
    size_t decoding_from = 0;  // the first step after the live sequence began to decode
    {
        std::unique_lock<std::mutex> lock(mutex);
        ASSERT_TRUE(stepped.wait_for(lock, std::chrono::seconds(20), [&] {
            return !steps.empty() && steps.back().decoded_rows == 1;
        }));
        decoding_from = steps.size();
    }
    GenerationRequest long_prompt;
    long_prompt.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 4 + 4 + 2
    long_prompt.max_tokens = 2;
    auto long_stream = engine.submit(long_prompt);
    ASSERT_TRUE(long_stream);
    const auto [text, end] = drain(*long_stream);
    EXPECT_EQ(end.completion_tokens, 2);
    EXPECT_EQ(end.prompt_tokens, 10);
    live_stream->cancel();
    std::vector<std::array<int, 3>> prompt_steps;  // (prompt tokens, decoded rows, forwards)
    int decoded_after = 0;  // rows of the step after the prompt's last chunk
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (size_t i = decoding_from; i < steps.size(); ++i) {
            if (steps[i].prompt_tokens == 0) continue;
            prompt_steps.push_back({steps[i].prompt_tokens, steps[i].decoded_rows, steps[i].forwards});
            if (i + 1 < steps.size()) decoded_after = steps[i + 1].decoded_rows;
        }
    }
    // The live sequence ran a token in the same forward as each chunk; after the last chunk the
    // new sequence decodes beside it.
    const std::vector<std::array<int, 3>> expected = {{4, 1, 1}, {4, 1, 1}, {2, 1, 1}};
    EXPECT_EQ(prompt_steps, expected);
    EXPECT_EQ(decoded_after, 2);
    EngineOptions empty_chunks(1, 1, 0, KvCacheType::f32);
    empty_chunks.prompt_chunk = 0;
    EXPECT_THROW(Engine(*m.model, *m.tokenizer, empty_chunks), Error);
}

TEST(Serve, AFullQueueRefusesAndACancelledRequestFreesItsSlot) {
    const TestModel& m = test_model();
    Engine engine(*m.model, *m.tokenizer, EngineOptions{1, 1, 0, KvCacheType::f32});
    auto first = engine.submit(request("a long one", 50, sampling(0.0f, 1)));
    auto second = engine.submit(request("waits", 5, sampling(0.0f, 1)));
    ASSERT_TRUE(first && second);
    EXPECT_FALSE(engine.submit(request("no room", 5, sampling(0.0f, 1))));
    first->cancel();
    const auto [text, end] = drain(*second);  // runs once the first left its slot
    EXPECT_EQ(end.completion_tokens, 5);
    EXPECT_EQ(engine.live(), 0);
    EXPECT_NE(engine.check_request(request(std::string(64, 'x'), 5, sampling(0, 1))), "");
    EXPECT_THROW(Engine(*m.model, *m.tokenizer, EngineOptions{0, 1, 0, KvCacheType::f32}), Error);
    EXPECT_THROW(Engine(*m.model, *m.tokenizer, EngineOptions{1, 1, 65, KvCacheType::f32}), Error);
}

namespace {

// A server on a free port of 127.0.0.1, serving from its own thread.
struct RunningServer {
    Engine engine;
    ApiServer server;
    int port = 0;
    std::thread thread;
    explicit RunningServer(int parallel, const TestModel& m = test_model(), std::vector<std::string> origins = {})
        : engine(*m.model, *m.tokenizer, EngineOptions{parallel, 0, 0, KvCacheType::f32}),
          server(engine, *m.tokenizer, SpecialTokens{}, "tiny", std::move(origins)) {
        port = server.bind("127.0.0.1", 0);
        thread = std::thread([this] { server.serve(); });
    }
    ~RunningServer() {
        server.stop();
        thread.join();
    }
    // A POST whose response body arrives piece by piece (receive returns false to hang up).
    httplib::Result post_streaming(const std::string& path, const std::string& body,
                                   const std::function<bool(const char*, size_t)>& receive) const {
        httplib::Request request;
        request.method = "POST";
        request.path = path;
        request.body = body;
        request.set_header("Content-Type", "application/json");
        request.content_receiver = [receive](const char* data, size_t size, uint64_t, uint64_t) {
            return receive(data, size);
        };
        return client().send(request);
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(30);
        return c;
    }
};

}  // namespace

// A request ends at the model's end-of-generation token unless it asks for ignore_eos.
TEST(Serve, IgnoreEosRunsPastTheEndOfGenerationToken) {
    const TestModel& m = test_model();
    Engine engine(*m.model, *m.tokenizer, EngineOptions{1, 1, 0, KvCacheType::f32});
    SpecialTokens special;
    special.end_of_generation = {10};
    const std::string body = R"({"prompt": "a", "max_tokens": 4)";
    EXPECT_EQ(parse_completion_request(body + "}", false, "tiny", *m.tokenizer, special, engine).generations[0].end_tokens,
              std::vector<int32_t>{10});
    EXPECT_EQ(parse_completion_request(body + R"(, "ignore_eos": false})", false, "tiny", *m.tokenizer, special, engine)
                  .generations[0].end_tokens,
              std::vector<int32_t>{10});
    EXPECT_TRUE(parse_completion_request(body + R"(, "ignore_eos": true})", false, "tiny", *m.tokenizer, special, engine)
                    .generations[0].end_tokens.empty());
}

// Integers at the edges of JSON's parse: one past int64 must not wrap into range, every uint64
// is a seed, and a null max_completion_tokens leaves max_tokens in force.
TEST(Serve, RequestNumbersAtTheirLimitsParseAsWritten) {
    const TestModel& m = test_model();
    Engine engine(*m.model, *m.tokenizer, EngineOptions{1, 1, 0, KvCacheType::f32});
    const auto parse = [&](const std::string& body, bool chat = false) {
        return parse_completion_request(body, chat, "tiny", *m.tokenizer, SpecialTokens{}, engine).generations.at(0);
    };
    try {
        parse(R"({"prompt": "a", "max_tokens": 9223372036854775808})");
        ADD_FAILURE() << "2^63 max_tokens accepted";
    } catch (const ApiError& e) {
        EXPECT_NE(std::string(e.what()).find("got 9223372036854775808"), std::string::npos) << e.what();
    }
    EXPECT_EQ(parse(R"({"prompt": "a", "seed": 18446744073709551615})").sampling.seed, UINT64_MAX);
    EXPECT_THROW(parse(R"({"prompt": "a", "seed": -1})"), ApiError);
    const std::string chat = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2)";
    EXPECT_EQ(parse(chat + R"(, "max_completion_tokens": null})", true).max_tokens, 2);
    EXPECT_EQ(parse(chat + R"(, "max_completion_tokens": 3})", true).max_tokens, 3);
    // Options the server does not implement pass at the values that mean "off" (a client
    // library may send them so); MalformedRequestsGetOpenAIErrorsWith4xx refuses the others.
    EXPECT_EQ(parse(R"({"prompt": "a", "max_tokens": 2, "echo": false, "logprobs": null, "frequency_penalty": 0,
                        "presence_penalty": 0.0, "logit_bias": {}, "best_of": 1, "suffix": ""})")
                  .max_tokens,
              2);
    EXPECT_EQ(parse(chat + R"(, "logprobs": false, "top_logprobs": 0, "tools": [], "functions": null,
                              "response_format": {"type": "text"}})",
                    true)
                  .max_tokens,
              2);
}

TEST(Serve, MalformedRequestsGetOpenAIErrorsWith4xx) {
    RunningServer s(1);
    httplib::Client c = s.client();
    struct Case {
        std::string path, body;
        int status;
        std::string param;  // "" for none
    };
    const std::vector<Case> cases = {
        {"/v1/completions", "{not json", 400, ""},
        {"/v1/completions", "[1, 2]", 400, ""},
        {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt"},  // one slot, no queue: one prompt
        {"/v1/completions", R"({"prompt": "a", "model": "other"})", 404, "model"},
        // The fuzzer's find: an echoed model name once carried its newline into the message.
        {"/v1/completions", R"({"prompt": "a", "model": "tia\u00e9\n)" + std::string(2000, 'x') + "\"}", 404, "model"},
        {"/v1/completions", R"({"prompt": "a", "max_tokens": "3"})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "a", "max_tokens": 64})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "a", "temperature": -1})", 400, "temperature"},
        {"/v1/completions", R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
        {"/v1/completions", R"({"prompt": "a", "top_k": -2})", 400, "top_k"},
        {"/v1/completions", R"({"prompt": "a", "seed": -2})", 400, "seed"},
        {"/v1/completions", R"({"prompt": "a", "stop": [""]})", 400, "stop"},
        {"/v1/completions", R"({"prompt": "a", "stop": 7})", 400, "stop"},
        {"/v1/completions", R"({"prompt": "a", "stream": "yes"})", 400, "stream"},
        {"/v1/completions", R"({"prompt": "a", "ignore_eos": 1})", 400, "ignore_eos"},
        {"/v1/completions", R"({"prompt": "a", "n": 2})", 400, "n"},
        // Options that would change the answer and are not implemented: refused, not ignored.
        {"/v1/completions", R"({"prompt": "a", "echo": "yes"})", 400, "echo"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "echo": true})", 400, "echo"},
        {"/v1/completions", R"({"prompt": [97, 256]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": [97, -1]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": [97.5]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": []})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": [[]]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": [["a"]]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": [{"text": "a"}]})", 400, "prompt"},
        {"/v1/completions", R"({"prompt": "a", "echo": false, "max_tokens": 0})", 400, "max_tokens"},
        {"/v1/completions", R"({"prompt": "a", "logprobs": 6})", 400, "logprobs"},
        {"/v1/completions", R"({"prompt": "a", "logprobs": -1})", 400, "logprobs"},
        {"/v1/completions", R"({"prompt": "a", "logprobs": true})", 400, "logprobs"},
        {"/v1/completions", R"({"prompt": "a", "logprobs": "1"})", 400, "logprobs"},
        {"/v1/completions", R"({"prompt": "a", "top_logprobs": 2})", 400, "top_logprobs"},
        {"/v1/completions", R"({"prompt": "a", "frequency_penalty": 0.5})", 400, "frequency_penalty"},
        {"/v1/completions", R"({"prompt": "a", "presence_penalty": "0"})", 400, "presence_penalty"},
        {"/v1/completions", R"({"prompt": "a", "logit_bias": {"65": 10}})", 400, "logit_bias"},
        {"/v1/completions", R"({"prompt": "a", "best_of": 3})", 400, "best_of"},
        {"/v1/completions", R"({"prompt": "a", "suffix": "end"})", 400, "suffix"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 2})", 400,
         "logprobs"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", 400,
         "top_logprobs"},
        {"/v1/chat/completions",
         R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21})", 400,
         "top_logprobs"},
        {"/v1/chat/completions",
         R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 1.5})", 400,
         "top_logprobs"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{}]})", 400,
         "tools"},
        {"/v1/chat/completions",
         R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}})", 400,
         "response_format"},
        {"/v1/completions", "{\"prompt\": \"" + std::string(64, 'x') + "\"}", 400, "prompt"},
        {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "hi"}]})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 3}]})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "assistant", "content": null}]})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": []}]})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"text": "hi"}]}]})", 400, "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", 400,
         "messages"},
        {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": ["hi"]}]})", 400, "messages"},
        {"/v1/chat/completions",
         R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", 400,
         "messages"},
        {"/tokenize", R"({"text": "a"})", 400, "content"},
        {"/detokenize", R"({"tokens": [1, 256]})", 400, "tokens"},
        {"/detokenize", R"({"tokens": "1"})", 400, "tokens"},
        {"/no/such/route", "{}", 404, ""},
        {"/no/such/route/" + std::string(5000, 'x'), "{}", 404, ""},  // the message quotes 64 bytes of it
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(k.path + " " + k.body);
        const auto res = c.Post(k.path, k.body, "application/json");
        ASSERT_TRUE(res);
        EXPECT_EQ(res->status, k.status);
        const json body = json::parse(res->body);
        ASSERT_TRUE(body.contains("error"));
        const std::string message = body["error"]["message"];
        EXPECT_FALSE(message.empty());
        EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
        EXPECT_LE(message.size(), 300u);
        EXPECT_EQ(body["error"]["param"], k.param.empty() ? json(nullptr) : json(k.param));
    }
    // curl -d's default Content-Type is a form's, whose bodies cpp-httplib alone would cut at 8 KiB.
    const json padded = {{"prompt", "a"}, {"max_tokens", 2}, {"user", std::string(9000, 'u')}};
    const auto form = c.Post("/v1/completions", dump_json(padded), "application/x-www-form-urlencoded");
    ASSERT_TRUE(form);
    EXPECT_EQ(form->status, 200) << form->body;
    const auto multipart =
        c.Post("/v1/completions", httplib::MultipartFormDataItems{{"prompt", "a", "", ""}});
    ASSERT_TRUE(multipart);
    EXPECT_EQ(multipart->status, 415);
    EXPECT_TRUE(json::parse(multipart->body).contains("error"));
    const auto models = c.Get("/v1/models");
    ASSERT_TRUE(models && models->status == 200);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
    const auto health = c.Get("/health");
    ASSERT_TRUE(health && health->status == 200);
    EXPECT_EQ(json::parse(health->body)["status"], "ok");
}

TEST(Serve, CompletionsAndTheirStreamsGiveGeneratesText) {
    RunningServer s(2);
    httplib::Client c = s.client();
    const TestModel& m = test_model();
    const GenerationResult expected =
        generate_text(*m.model, *m.tokenizer, SpecialTokens{}, "Hello", 10, sampling(0.7f, 42), KvCacheType::f32);
    const json ask = {{"prompt", "Hello"}, {"max_tokens", 10}, {"temperature", 0.7}, {"seed", 42}, {"top_k", 40},
                      {"top_p", 0.95}};
    const auto whole = c.Post("/v1/completions", dump_json(ask), "application/json");
    ASSERT_TRUE(whole && whole->status == 200) << (whole ? whole->body : "no response");
    const json body = json::parse(whole->body);
    // The model's bytes as JSON carries them: bytes that are not UTF-8 become U+FFFD.
    const json expected_text = json::parse(dump_json(expected.text));
    EXPECT_EQ(body["choices"][0]["text"], expected_text);
    EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(body["usage"]["completion_tokens"], 10);
    EXPECT_EQ(body["usage"]["prompt_tokens"], expected.prompt_tokens);

    json streamed = ask;
    streamed["stream"] = true;
    std::string events;
    const auto res = s.post_streaming("/v1/completions", dump_json(streamed), [&](const char* data, size_t size) {
        events.append(data, size);
        return true;
    });
    ASSERT_TRUE(res);
    std::string text, finish;
    size_t at = 0;
    bool done = false;
    while ((at = events.find("data: ", at)) != std::string::npos) {
        const size_t end = events.find("\n\n", at);
        const std::string data = events.substr(at + 6, end - at - 6);
        at = end;
        if (data == "[DONE]") {
            done = true;
            continue;
        }
        const json chunk = json::parse(data);
        text += chunk["choices"][0]["text"].get<std::string>();
        if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(json(text), expected_text);
    EXPECT_EQ(finish, "length");

    const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"temperature", 0}};
    const auto answer = c.Post("/v1/chat/completions", dump_json(chat), "application/json");
    ASSERT_TRUE(answer && answer->status == 200);
    const json reply = json::parse(answer->body);
    const GenerationResult chat_expected =
        generate_text(*m.model, *m.tokenizer, SpecialTokens{}, apply_chat_template(chat["messages"]), 6, sampling(0, 1),
                      KvCacheType::f32, nullptr, {kChatTurnEnd});
    EXPECT_EQ(reply["choices"][0]["message"]["content"], json::parse(dump_json(chat_expected.text)));
    EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant");
}

// Chat UIs and agent frameworks send a message's content as text parts, and newer OpenAI
// clients name the system role "developer": both render as the plain forms do.
TEST(Serve, TextPartsAndTheDeveloperRoleRenderAsThePlainForms) {
    const json plain = json::parse(R"([{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Hello\nthere"}])");
    const json parts = json::parse(R"([{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                                      {"role": "user", "content": [{"type": "text", "text": "Hello"},
                                                                   {"type": "text", "text": "there"}]}])");
    EXPECT_EQ(apply_chat_template(plain), "<|system|>\nBe brief.\n<|user|>\nHello\nthere\n<|assistant|>\n");
    EXPECT_EQ(apply_chat_template(parts), apply_chat_template(plain));
}

namespace {

// Checks reported log-probabilities against a full forward over `tokens` (the model run apart
// from the engine): reported[i] is token tokens[first + i]'s, under the logits of the row
// before it, with its alternatives that row's most likely tokens in order.
void expect_logprobs_of_full_forward(const std::vector<int32_t>& tokens, size_t first,
                                     const std::vector<TokenLogprobs>& reported, size_t alternatives) {
    const TestModel& m = test_model();
    InferenceSession session(*m.model, 64);
    const int vocab = m.tokenizer->vocab_size();
    const float* logits = session.run(tokens.data(), static_cast<int>(tokens.size()) - 1, LogitRows::all);
    for (size_t i = 0; i < reported.size(); ++i) {
        SCOPED_TRACE("token " + std::to_string(first + i));
        const float* row = logits + (first + i - 1) * static_cast<size_t>(vocab);
        long double sum = 0;
        for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<long double>(row[v]));
        const auto reference = [&](int v) { return static_cast<double>(row[v] - std::log(sum)); };
        EXPECT_EQ(reported[i].bytes, m.tokenizer->decode(std::vector<int32_t>{tokens[first + i]}));
        EXPECT_NEAR(reported[i].logprob, reference(tokens[first + i]), 1e-5);
        std::vector<int> order(static_cast<size_t>(vocab));
        for (int v = 0; v < vocab; ++v) order[v] = v;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
        ASSERT_EQ(reported[i].top.size(), alternatives);
        for (size_t k = 0; k < alternatives; ++k) {
            EXPECT_EQ(reported[i].top[k].bytes, m.tokenizer->decode(std::vector<int32_t>{order[k]}));
            EXPECT_NEAR(reported[i].top[k].logprob, reference(order[k]), 1e-5);
        }
    }
}

// Everything a stream delivers, to its end, with its logprobs.
std::pair<std::string, StreamUpdate> drain(RequestStream& stream, std::vector<TokenLogprobs>& logprobs) {
    std::string text;
    StreamUpdate update;
    do {
        if (!stream.next(update, std::chrono::milliseconds(20000))) ADD_FAILURE() << "the stream stalled";
        text += update.text;
        logprobs.insert(logprobs.end(), update.logprobs.begin(), update.logprobs.end());
    } while (!update.done);
    return {text, update};
}

}  // namespace

// Each sampled token's log-probability is the log softmax of the logits that a full forward
// over the prompt and the tokens before it gives at its place (the model run independently of
// the engine's decode), and its alternatives are that row's most likely tokens, in order.
TEST(Serve, LogprobsAreTheFullForwardsLogSoftmaxAtEachToken) {
    const TestModel& m = test_model();
    Engine engine(*m.model, *m.tokenizer, EngineOptions{2, 1, 0, KvCacheType::f32});
    const int generated = 12, alternatives = 3;
    GenerationRequest r = request("Hello", generated, sampling(0.9f, 5));
    r.logprobs = alternatives;
    std::vector<int32_t> tokens = r.prompt;
    const size_t prompt_tokens = tokens.size();
    const std::shared_ptr<RequestStream> stream = engine.submit(r);
    ASSERT_TRUE(stream);
    std::vector<TokenLogprobs> reported;
    const auto [text, end] = drain(*stream, reported);
    ASSERT_EQ(end.completion_tokens, generated);
    ASSERT_EQ(reported.size(), static_cast<size_t>(generated));
    std::string joined;
    int code_points = 0;
    for (const TokenLogprobs& t : reported) {
        EXPECT_TRUE(t.scored);
        EXPECT_EQ(t.text_offset, code_points);
        for (const char byte : t.bytes) code_points += (static_cast<unsigned char>(byte) & 0xC0) != 0x80;
        joined += t.bytes;
    }
    EXPECT_EQ(joined, text);  // no stop string: every sampled token's bytes are shown
    for (const int32_t token : m.tokenizer->encode(joined)) tokens.push_back(token);
    ASSERT_EQ(tokens.size(), prompt_tokens + generated);
    expect_logprobs_of_full_forward(tokens, prompt_tokens, reported, alternatives);
}

// An echoed prompt comes first, its first token unscored and every other one scored as the
// full forward scores it, a chunk a step; the tokens generated after it are those of the same
// request without echo.
TEST(Serve, EchoScoresThePromptAndLeavesTheGenerationAsItWas) {
    const TestModel& m = test_model();
    EngineOptions options{2, 1, 0, KvCacheType::f32};
    options.prompt_chunk = 4;
    std::mutex mutex;
    std::vector<int> scored_per_step;
    options.on_step = [&](const EngineStep& step) {
        std::lock_guard<std::mutex> lock(mutex);
        if (step.scored_tokens > 0) scored_per_step.push_back(step.scored_tokens);
    };
    Engine engine(*m.model, *m.tokenizer, options);
    GenerationRequest plain = request("Hello there", 6, sampling(0.8f, 9));
    GenerationRequest echoed = plain;
    echoed.echo = true;
    echoed.logprobs = 2;
    const std::vector<int32_t> prompt = plain.prompt;
    const auto plain_stream = engine.submit(plain);
    const auto echoed_stream = engine.submit(echoed);
    ASSERT_TRUE(plain_stream && echoed_stream);
    std::vector<TokenLogprobs> none, reported;
    const auto [plain_text, plain_end] = drain(*plain_stream, none);
    const auto [text, end] = drain(*echoed_stream, reported);
    EXPECT_TRUE(none.empty());
    EXPECT_EQ(text, "Hello there" + plain_text);
    EXPECT_EQ(end.prompt_tokens, plain_end.prompt_tokens);
    EXPECT_EQ(end.completion_tokens, plain_end.completion_tokens);
    ASSERT_EQ(reported.size(), prompt.size() + 6);
    EXPECT_FALSE(reported[0].scored);
    EXPECT_EQ(reported[0].bytes, "H");
    std::vector<int32_t> tokens = m.tokenizer->encode(text);
    ASSERT_EQ(tokens.size(), reported.size());
    expect_logprobs_of_full_forward(tokens, 1, std::vector<TokenLogprobs>(reported.begin() + 1, reported.end()), 2);
    for (size_t i = 0; i < reported.size(); ++i) EXPECT_EQ(reported[i].text_offset, static_cast<int>(i));  // ASCII
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(scored_per_step, (std::vector<int>{4, 4, 2}));  // 10 of the 11 tokens predict one
}

// The engine reserves the scratch of its largest step at start-up, and no load grows it: every
// slot running a prompt as long as the context at once, and echoed prompts scored beside them.
TEST(Serve, ScratchIsReservedAtStartAndNoLoadGrowsIt) {
    const TestModel& m = test_model();
    Engine engine(*m.model, *m.tokenizer, EngineOptions{4, 4, 0, KvCacheType::f32});
    const size_t reserved = engine.scratch_bytes();
    EXPECT_GT(reserved, 0u);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 8; ++i) {
        GenerationRequest r = request(std::string(60 + i % 2, static_cast<char>('a' + i)), 2, sampling(0.5f, i));
        r.echo = i % 2 == 1;
        r.logprobs = r.echo ? 1 : -1;
        streams.push_back(engine.submit(r));
        ASSERT_TRUE(streams.back());
    }
    for (const auto& stream : streams) {
        std::vector<TokenLogprobs> logprobs;
        EXPECT_EQ(drain(*stream, logprobs).second.error, "");
    }
    EXPECT_EQ(engine.scratch_bytes(), reserved);
}

// Several requests at once (a completions request's prompts) are taken all or none: a batch
// that does not fit the free slots and queue places leaves the engine as it was.
TEST(Serve, SubmitAllTakesEveryRequestOrNone) {
    const TestModel& m = test_model();
    Engine engine(*m.model, *m.tokenizer, EngineOptions{2, 1, 0, KvCacheType::f32});
    const std::vector<GenerationRequest> four(4, request("The state", 5, sampling(0.0f, 3)));
    EXPECT_TRUE(engine.submit_all(four).empty());
    EXPECT_EQ(engine.live() + engine.waiting(), 0);
    const std::vector<GenerationRequest> three(four.begin(), four.begin() + 3);
    const std::vector<std::shared_ptr<RequestStream>> streams = engine.submit_all(three);
    ASSERT_EQ(streams.size(), 3u);
    EXPECT_FALSE(engine.submit(request("no room", 5, sampling(0.0f, 1))));
    const GenerationResult expected =
        generate_text(*m.model, *m.tokenizer, SpecialTokens{}, "The state", 5, sampling(0.0f, 3), KvCacheType::f32);
    for (const auto& stream : streams) EXPECT_EQ(drain(*stream).first, expected.text);
}

// Logprobs over HTTP in OpenAI's two shapes: a completion's {tokens, token_logprobs,
// top_logprobs, text_offset}, the same whole and streamed, and a chat answer's content list,
// whose greedy tokens are each their row's most likely; scoring requests of one prompt and of
// several.
TEST(Serve, LogprobsTakeOpenAIsShapesWholeAndStreamed) {
    RunningServer s(2);
    httplib::Client c = s.client();
    const json ask = {{"prompt", "Hello"}, {"max_tokens", 8}, {"temperature", 0.7}, {"seed", 3}, {"logprobs", 2}};
    const auto whole = c.Post("/v1/completions", dump_json(ask), "application/json");
    ASSERT_TRUE(whole && whole->status == 200) << (whole ? whole->body : "no response");
    const json logprobs = json::parse(whole->body)["choices"][0]["logprobs"];
    ASSERT_EQ(logprobs["tokens"].size(), 8u);
    ASSERT_EQ(logprobs["token_logprobs"].size(), 8u);
    ASSERT_EQ(logprobs["top_logprobs"].size(), 8u);
    ASSERT_EQ(logprobs["text_offset"].size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
        EXPECT_LE(logprobs["token_logprobs"][i].get<double>(), 0.0);
        EXPECT_EQ(logprobs["top_logprobs"][i].size(), 2u);
    }

    json streamed = ask;
    streamed["stream"] = true;
    std::string events;
    ASSERT_TRUE(s.post_streaming("/v1/completions", dump_json(streamed), [&](const char* data, size_t size) {
        events.append(data, size);
        return true;
    }));
    json streamed_logprobs = json::array();
    for (size_t at = 0; (at = events.find("data: ", at)) != std::string::npos;) {
        const size_t end = events.find("\n\n", at);
        const std::string data = events.substr(at + 6, end - at - 6);
        at = end;
        if (data == "[DONE]") continue;
        const json choice = json::parse(data)["choices"][0];
        if (choice["logprobs"].is_null()) continue;
        for (const json& lp : choice["logprobs"]["token_logprobs"]) streamed_logprobs.push_back(lp);
    }
    EXPECT_EQ(streamed_logprobs, logprobs["token_logprobs"]);

    const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"temperature", 0},
                       {"logprobs", true}, {"top_logprobs", 2}};
    const auto answer = c.Post("/v1/chat/completions", dump_json(chat), "application/json");
    ASSERT_TRUE(answer && answer->status == 200) << (answer ? answer->body : "no response");
    const json reply = json::parse(answer->body);
    const json content = reply["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), reply["usage"]["completion_tokens"].get<size_t>());
    for (const json& token : content) {
        ASSERT_EQ(token["top_logprobs"].size(), 2u);
        EXPECT_EQ(token["top_logprobs"][0]["token"], token["token"]);  // greedy: the likeliest
        EXPECT_EQ(token["top_logprobs"][0]["logprob"], token["logprob"]);
        EXPECT_EQ(token["bytes"].size(), 1u);  // a byte-level model's token is one byte
    }
    // OpenAI's scoring request: the prompt echoed with its log-probabilities, nothing generated;
    // a prompt of token ids is the same prompt.
    for (const json& prompt : {json("Hello"), json::parse("[72, 101, 108, 108, 111]")}) {
        const json score = {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}};
        const auto scored = c.Post("/v1/completions", dump_json(score), "application/json");
        ASSERT_TRUE(scored && scored->status == 200) << (scored ? scored->body : "no response");
        const json choice = json::parse(scored->body)["choices"][0];
        EXPECT_EQ(choice["text"], "Hello");
        EXPECT_EQ(json::parse(scored->body)["usage"]["completion_tokens"], 0);
        EXPECT_EQ(choice["logprobs"]["tokens"], json::parse(R"(["H", "e", "l", "l", "o"])"));
        EXPECT_TRUE(choice["logprobs"]["token_logprobs"][0].is_null());
        EXPECT_TRUE(choice["logprobs"]["top_logprobs"][0].is_null());
        EXPECT_EQ(choice["logprobs"]["text_offset"], json::parse("[0, 1, 2, 3, 4]"));
        for (size_t i = 1; i < 5; ++i) EXPECT_LT(choice["logprobs"]["token_logprobs"][i].get<double>(), 0.0);
    }
    // Several prompts in one request, as an evaluation harness batches its scoring requests: a
    // choice each, in order, each the answer its prompt gets alone; usage summed.
    const json batch = {{"prompt", json::parse("[[72, 101, 108, 108, 111], [72, 105]]")},
                        {"max_tokens", 1}, {"echo", true}, {"logprobs", 1}, {"temperature", 0}};
    const auto batched = c.Post("/v1/completions", dump_json(batch), "application/json");
    ASSERT_TRUE(batched && batched->status == 200) << (batched ? batched->body : "no response");
    const json answers = json::parse(batched->body);
    ASSERT_EQ(answers["choices"].size(), 2u);
    int prompt_tokens = 0;
    for (size_t i = 0; i < 2; ++i) {
        json alone = batch;
        alone["prompt"] = batch["prompt"][i];
        const auto single = c.Post("/v1/completions", dump_json(alone), "application/json");
        ASSERT_TRUE(single && single->status == 200);
        const json answer = json::parse(single->body);
        EXPECT_EQ(answers["choices"][i]["index"], i);
        EXPECT_EQ(answers["choices"][i]["text"], answer["choices"][0]["text"]);
        EXPECT_EQ(answers["choices"][i]["logprobs"], answer["choices"][0]["logprobs"]);
        prompt_tokens += answer["usage"]["prompt_tokens"].get<int>();
    }
    EXPECT_EQ(answers["usage"]["prompt_tokens"], prompt_tokens);
    EXPECT_EQ(answers["usage"]["completion_tokens"], 2);
    json streamed_batch = batch;
    streamed_batch["stream"] = true;
    const auto refused = c.Post("/v1/completions", dump_json(streamed_batch), "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400);
    json too_many = batch;
    too_many["prompt"] = json::parse(R"(["a", "b", "c"])");  // two slots, no queue
    const auto over = c.Post("/v1/completions", dump_json(too_many), "application/json");
    ASSERT_TRUE(over);
    EXPECT_EQ(over->status, 400);
    EXPECT_EQ(json::parse(over->body)["error"]["param"], "prompt");

    // Not asked for: null, as OpenAI answers.
    const json plain = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
    const auto no_logprobs = c.Post("/v1/chat/completions", dump_json(plain), "application/json");
    ASSERT_TRUE(no_logprobs && no_logprobs->status == 200);
    EXPECT_TRUE(json::parse(no_logprobs->body)["choices"][0]["logprobs"].is_null());
}

TEST(Serve, AClientThatDisconnectsMidStreamFreesItsSlot) {
    // A long context, so the generation is still running when the hang-up is noticed.
    static const TestModel long_model(4096);
    RunningServer s(1, long_model);
    httplib::Client c = s.client();
    const json ask = {{"prompt", "Go on"}, {"max_tokens", 4000}, {"stream", true}, {"temperature", 0}};
    int chunks = 0;
    s.post_streaming("/v1/completions", dump_json(ask),
                     [&](const char*, size_t) { return ++chunks < 2; });  // hang up after the first chunk
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.engine.live() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(s.engine.live(), 0);
    EXPECT_EQ(s.engine.cancelled(), 1);
    // The freed slot serves the next request.
    const auto next = c.Post("/v1/completions", R"({"prompt": "again", "max_tokens": 3})", "application/json");
    ASSERT_TRUE(next);
    EXPECT_EQ(next->status, 200);
}

// A client that gives up waiting for a whole (not streamed) answer frees its slot as well.
TEST(Serve, AClientThatStopsWaitingForAWholeAnswerFreesItsSlot) {
    // 16,000 tokens run for seconds (attention grows with the context); the client waits 0.2 s.
    static const TestModel longer_model(16384);
    RunningServer s(1, longer_model);
    httplib::Client impatient = s.client();
    impatient.set_read_timeout(0, 200'000);  // then the client closes the connection
    const auto abandoned = impatient.Post("/v1/completions", R"({"prompt": "Go on", "max_tokens": 16000})",
                                          "application/json");
    EXPECT_FALSE(abandoned) << "the answer came within 0.2 s: lengthen the generation";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.engine.live() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(s.engine.live(), 0);
    EXPECT_EQ(s.engine.cancelled(), 1);
    const auto next = s.client().Post("/v1/completions", R"({"prompt": "again", "max_tokens": 3})", "application/json");
    ASSERT_TRUE(next);
    EXPECT_EQ(next->status, 200);
}

TEST(Serve, RetrievesItsModelById) {
    RunningServer s(1);
    auto c = s.client();
    const auto ours = c.Get("/v1/models/tiny");
    ASSERT_TRUE(ours);
    EXPECT_EQ(ours->status, 200);
    EXPECT_EQ(json::parse(ours->body)["id"], "tiny");
    const auto other = c.Get("/v1/models/other");
    ASSERT_TRUE(other);
    EXPECT_EQ(other->status, 404);
    EXPECT_EQ(json::parse(other->body)["error"]["param"], "model");
}

// A browser page on another origin gets CORS answers only for the origins the server was
// started with, and none by default.
TEST(Serve, CrossOriginRequestsAreAnsweredOnlyForAllowedOrigins) {
    const httplib::Headers from_ui = {{"Origin", "http://localhost:3000"}};
    const httplib::Headers from_elsewhere = {{"Origin", "http://elsewhere.example"}};
    const std::string body = R"({"prompt": "a", "max_tokens": 1})";
    {
        RunningServer s(1);
        auto c = s.client();
        const auto preflight = c.Options("/v1/completions", from_ui);
        ASSERT_TRUE(preflight);
        EXPECT_EQ(preflight->status, 404);
        const auto post = c.Post("/v1/completions", from_ui, body, "application/json");
        ASSERT_TRUE(post);
        EXPECT_EQ(post->status, 200);
        EXPECT_FALSE(post->has_header("Access-Control-Allow-Origin"));
    }
    RunningServer s(1, test_model(), {"http://localhost:3000"});
    auto c = s.client();
    const auto preflight = c.Options("/v1/chat/completions", from_ui);
    ASSERT_TRUE(preflight);
    EXPECT_EQ(preflight->status, 204);
    EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
    EXPECT_NE(preflight->get_header_value("Access-Control-Allow-Headers").find("Content-Type"), std::string::npos);
    const auto refused = c.Options("/v1/chat/completions", from_elsewhere);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 403);
    EXPECT_FALSE(refused->has_header("Access-Control-Allow-Origin"));
    EXPECT_TRUE(json::parse(refused->body).contains("error"));
    const auto post = c.Post("/v1/completions", from_ui, body, "application/json");
    ASSERT_TRUE(post);
    EXPECT_EQ(post->status, 200);
    EXPECT_EQ(post->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
    const auto foreign_post = c.Post("/v1/completions", from_elsewhere, body, "application/json");
    ASSERT_TRUE(foreign_post);
    EXPECT_FALSE(foreign_post->has_header("Access-Control-Allow-Origin"));
}

TEST(Serve, ABusyServerAnswers503WithRetryAfter) {
    static const TestModel long_model(4096);
    RunningServer s(1, long_model);  // one slot, no queue
    std::promise<void> streaming;
    std::promise<void> checked;
    std::thread holder([&] {
        bool first = true;
        s.post_streaming("/v1/completions", R"({"prompt": "hold", "max_tokens": 4000, "stream": true})",
                         [&](const char*, size_t) {
                             if (first) {
                                 first = false;
                                 streaming.set_value();
                                 checked.get_future().wait();
                             }
                             return false;
                         });
    });
    streaming.get_future().wait();
    const auto refused = s.client().Post("/v1/completions", R"({"prompt": "me too"})", "application/json");
    checked.set_value();
    holder.join();
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 503);
    EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(refused->body)["error"]["type"], "server_busy");
}

namespace {

// `dqt serve` as a user starts it: a child process on a free loopback port, its port read from
// the line it prints; stopped with SIGTERM, as a service manager would.
class ServeProcess {
public:
    ServeProcess(const std::string& model, const std::string& log_path) : log_path_(log_path) {
        pid_ = fork();
        if (pid_ == 0) {
            const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(log, STDERR_FILENO);
            dup2(log, STDOUT_FILENO);
            execl(DQT_BINARY, DQT_BINARY, "serve", model.c_str(), "--port", "0", "--parallel", "2", "--threads", "1",
                  static_cast<char*>(nullptr));
            _exit(127);
        }
    }
    ~ServeProcess() {
        if (pid_ > 0 && !stopped_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }
    // The base URL once the server listens; empty after 60 s without it.
    std::string wait_for_url() const {
        const std::string marker = " on http://";
        for (int tries = 0; tries < 600; ++tries) {
            std::ifstream log(log_path_);
            const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
            const size_t at = text.find(marker);
            if (at != std::string::npos && text.find('\n', at) != std::string::npos)
                return text.substr(at + 4, text.find(' ', at + marker.size()) - at - 4);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return "";
    }
    // SIGTERM, then the exit status (-1: it did not exit within 10 s).
    int stop() {
        kill(pid_, SIGTERM);
        for (int tries = 0; tries < 100; ++tries) {
            int status = 0;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                stopped_ = true;
                return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return -1;
    }

private:
    std::string log_path_;
    pid_t pid_ = -1;
    bool stopped_ = false;
};

}  // namespace

// The server a user runs, driven by OpenAI's own Node client (npm `openai`, installed by
// scripts/setup.sh into tools/openai-client): models, a completion and a chat answer, both
// streamed too, and an out-of-range request as the client's APIError 400; then by curl.
TEST(Serve, OpenAIsNodeClientAndCurlDriveDqtServe) {
    const std::string client_dir = std::string(DQT_SOURCE_DIR) + "/tools/openai-client";
    ASSERT_TRUE(std::filesystem::exists(client_dir + "/node_modules/openai"))
        << "the openai client is not installed: run scripts/setup.sh (npm install in tools/openai-client)";
    dqt::testing::TempDir root("serve-client");
    const std::string out = root / "run";
    const dqt::testing::CommandResult trained = dqt::testing::run_command(
        std::string(DQT_BINARY) + " train --data " + dqt::testing::tiny_dataset_dir() + " --out " + out +
        " --method dqt --dim 32 --layers 2 --heads 2 --ffn 64 --seq-len 96 --batch 4 --eval-tokens 1024 --steps 3"
        " --no-sample --quiet");
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    ServeProcess server(out + "/checkpoint.dqt", root / "serve.log");
    const std::string url = server.wait_for_url();
    ASSERT_FALSE(url.empty()) << "dqt serve did not start";
    const dqt::testing::CommandResult client =
        dqt::testing::run_command("node " + client_dir + "/check_serve.mjs " + url);
    EXPECT_EQ(client.exit_code, 0) << client.output;
    EXPECT_NE(client.output.find("\nok"), std::string::npos) << client.output;
    const dqt::testing::CommandResult curl = dqt::testing::run_command(
        "curl -s " + url + "/completions -d '{\"prompt\": \"Our\", \"max_tokens\": 4, \"temperature\": 0}'");
    ASSERT_EQ(curl.exit_code, 0) << curl.output;
    const json answer = json::parse(curl.output);
    EXPECT_EQ(answer["usage"]["completion_tokens"], 4) << curl.output;
    EXPECT_EQ(server.stop(), 0) << "dqt serve did not exit cleanly on SIGTERM";
}
