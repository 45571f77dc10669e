#include "serve/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>

#include "core/error.h"
#include "serve/api.h"

namespace dqt {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
    if (error.status() == 503) res.set_header("Retry-After", "1");
    send_json(res, error.status(), error.body());
}

int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string next_id(bool chat) {
    static std::atomic<uint64_t> counter{0};
    return std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++counter);
}

nlohmann::json parse_object(const std::string& text) {
    nlohmann::json body;
    try {
        body = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
        throw ApiError(400, "invalid_request_error", "the request body is not valid JSON");
    }
    if (!body.is_object()) throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
    return body;
}

// One update of a stream as server-sent events: its text chunk, then at the end the final
// chunk (finish reason, usage) and "[DONE]"; an error as OpenAI's error object.
std::string server_sent_events(const CompletionCall& call, const std::string& id, const std::string& model_name,
                               int64_t created, const StreamUpdate& update, bool& first) {
    const auto event = [](const nlohmann::json& data) { return "data: " + dump_json(data) + "\n\n"; };
    if (!update.error.empty()) return event(ApiError(500, "server_error", update.error).body()) + "data: [DONE]\n\n";
    std::string events;
    if (!update.text.empty()) {
        events += event(completion_chunk(call, id, model_name, created, update.text, nullptr, first));
        first = false;
    }
    if (update.done) {
        events += event(completion_chunk(call, id, model_name, created, "", &update, first)) + "data: [DONE]\n\n";
        first = false;
    }
    return events;
}

}  // namespace

ApiServer::ApiServer(Engine& engine, const Tokenizer& tokenizer, SpecialTokens special, std::string model_name)
    : engine_(engine),
      tokenizer_(tokenizer),
      special_(std::move(special)),
      model_name_(std::move(model_name)),
      http_(std::make_unique<httplib::Server>()) {
    httplib::Server& http = *http_;
    // One handler thread per stream a client may hold open: every slot and queue place, and a
    // few for the quick routes and the 503s.
    const size_t handlers = static_cast<size_t>(engine.parallel()) + 64;
    http.new_task_queue = [handlers] { return new httplib::ThreadPool(handlers); };
    http.set_payload_max_length(8 << 20);

    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        send_json(res, 200, {{"status", "ok"}, {"slots", engine_.parallel()}, {"slots_busy", engine_.live()},
                             {"queued", engine_.waiting()}, {"cancelled", engine_.cancelled()}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        send_json(res, 200,
                  {{"object", "list"},
                   {"data", nlohmann::json::array({{{"id", model_name_},
                                                    {"object", "model"},
                                                    {"created", 0},
                                                    {"owned_by", "dqt"},
                                                    {"context_length", engine_.context()}}})}});
    });
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
        try {
            const nlohmann::json body = parse_object(req.body);
            const auto content = body.find("content");
            if (content == body.end() || !content->is_string())
                throw ApiError(400, "invalid_request_error", "'content' is required and must be a string", "content");
            send_json(res, 200, {{"tokens", tokenizer_.encode(content->get<std::string>())}});
        } catch (const ApiError& e) {
            send_error(res, e);
        }
    });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
        try {
            const nlohmann::json body = parse_object(req.body);
            const auto tokens = body.find("tokens");
            if (tokens == body.end() || !tokens->is_array())
                throw ApiError(400, "invalid_request_error", "'tokens' is required and must be an array", "tokens");
            std::vector<int32_t> ids;
            for (const nlohmann::json& t : *tokens) {
                if (!t.is_number_integer() || t < 0 || t >= tokenizer_.vocab_size())
                    throw ApiError(400, "invalid_request_error",
                                   "'tokens' must hold token ids from 0 to " +
                                       std::to_string(tokenizer_.vocab_size() - 1),
                                   "tokens");
                ids.push_back(t.get<int32_t>());
            }
            send_json(res, 200, {{"content", tokenizer_.decode(ids)}});
        } catch (const ApiError& e) {
            send_error(res, e);
        }
    });

    const auto completion = [this](bool chat) {
        return [this, chat](const httplib::Request& req, httplib::Response& res) {
            try {
                auto call = std::make_shared<CompletionCall>(
                    parse_completion_request(req.body, chat, model_name_, tokenizer_, special_, engine_));
                std::shared_ptr<RequestStream> stream = engine_.submit(call->generation);
                if (!stream)
                    throw ApiError(503, "server_busy",
                                   "every slot is busy and the queue is full: retry after a moment");
                const std::string id = next_id(chat);
                const int64_t created = unix_seconds();
                if (!call->stream) {
                    std::string text;
                    StreamUpdate update;
                    for (;;) {
                        if (!stream->next(update, kPoll)) continue;
                        if (!update.error.empty()) throw ApiError(500, "server_error", update.error);
                        text += update.text;
                        if (update.done) break;
                    }
                    send_json(res, 200, completion_response(*call, id, model_name_, created, text, update));
                    return;
                }
                res.set_header("Cache-Control", "no-cache");
                res.set_chunked_content_provider(
                    "text/event-stream",
                    [this, call, stream, id, created, first = std::make_shared<bool>(true)](
                        size_t, httplib::DataSink& sink) {
                        StreamUpdate update;
                        if (!stream->next(update, kPoll)) return true;  // nothing yet: poll again
                        const std::string events = server_sent_events(*call, id, model_name_, created, update, *first);
                        if (!sink.write(events.data(), events.size())) {
                            stream->cancel();  // the client went away
                            return false;
                        }
                        if (update.done) sink.done();
                        return true;
                    },
                    [stream](bool success) {
                        if (!success) stream->cancel();
                    });
            } catch (const ApiError& e) {
                send_error(res, e);
            }
        };
    };
    http.Post("/v1/completions", completion(false));
    http.Post("/v1/chat/completions", completion(true));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string message = "internal error";
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            message = e.what();
        } catch (...) {
        }
        send_json(res, 500, ApiError(500, "server_error", message).body());
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;  // a handler already answered with its JSON error
        const std::string message = res.status == 404 ? "no route " + req.method + " " + req.path
                                                      : "the request could not be served (HTTP " +
                                                            std::to_string(res.status) + ")";
        send_json(res, res.status, ApiError(res.status, "invalid_request_error", message).body());
    });
}

ApiServer::~ApiServer() = default;

int ApiServer::bind(const std::string& host, int port) {
    const int bound = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
    require(bound > 0, "cannot listen on " + host + ":" + std::to_string(port) +
                           " (in use, or not an address of this machine): choose another --host or --port");
    return bound;
}

void ApiServer::serve() { http_->listen_after_bind(); }

void ApiServer::stop() { http_->stop(); }

}  // namespace dqt
