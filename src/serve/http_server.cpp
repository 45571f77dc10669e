#include "serve/http_server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "serve/api.h"

namespace dqt {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);
constexpr size_t kBodyLimit = 8 << 20;  // bytes of a request body
// Handler threads beyond one a slot and queue place: for the quick routes, the 503s, and
// clients that hold a connection open without a request (idle keep-alive, slow senders).
constexpr size_t kSpareHandlers = 64;
constexpr time_t kKeepAliveSeconds = 2;  // an idle connection holds a handler thread this long

// cpp-httplib 0.11 (Debian 12's) neither hands a handler its socket nor tells it whether the
// client is still there. A stream learns it from a failed write; a non-streaming request, whose
// client may give up long before the answer is ready, finds its connection's socket by the
// peer's address and port (no other socket has that peer while the connection is open, and it
// is open while its handler runs) and peeks at it: an orderly close or a reset means the client
// left, and its slot is freed.
class ClientConnection {
public:
    explicit ClientConnection(const httplib::Request& req) {
        std::error_code error;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
            const std::string name = entry.path().filename().string();
            int fd = -1;
            if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc{}) continue;
            sockaddr_storage peer{};
            socklen_t length = sizeof(peer);
            if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) continue;
            char host[NI_MAXHOST], port[NI_MAXSERV];
            if (getnameinfo(reinterpret_cast<const sockaddr*>(&peer), length, host, sizeof host, port, sizeof port,
                            NI_NUMERICHOST | NI_NUMERICSERV) != 0)
                continue;
            if (req.remote_addr == host && std::to_string(req.remote_port) == port) {
                fd_ = fd;
                return;
            }
        }
    }
    // False when the socket was not found: the request then runs to its end, as before.
    bool gone() const {
        if (fd_ < 0) return false;
        char byte = 0;
        const ssize_t got = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }

private:
    int fd_ = -1;
};

// The request's body. The POST routes read it themselves: cpp-httplib would refuse a body over
// 8 KiB sent as a form (curl -d's default Content-Type) before any handler ran.
std::string read_body(const httplib::Request& req, const httplib::Response& res, const httplib::ContentReader& reader) {
    if (req.is_multipart_form_data())
        throw ApiError(415, "invalid_request_error", "the request body must be JSON, not multipart form data");
    std::string body;
    if (!reader([&body](const char* data, size_t size) {
            body.append(data, size);
            return true;
        })) {
        if (res.status == 413)
            throw ApiError(413, "invalid_request_error",
                           "the request body is over the server's limit of " + std::to_string(kBodyLimit >> 20) + " MiB");
        throw ApiError(400, "invalid_request_error", "the request body could not be read (malformed or cut short)");
    }
    return body;
}

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
    if (error.status() == 503) res.set_header("Retry-After", "1");
    send_json(res, error.status(), error.body());
}

// Cross-origin requests from a browser page (a chat UI served from another origin): answered
// for the origins given, "*" for any. None by default: with CORS on, any web page the browser
// opens may use the server, and a server on 127.0.0.1 is then reachable from the web.
void allow_origins(httplib::Server& http, const std::vector<std::string>& origins) {
    if (origins.empty()) return;
    const auto allowed = [origins](const httplib::Request& req) {
        const std::string origin = req.get_header_value("Origin");
        return !origin.empty() && std::any_of(origins.begin(), origins.end(), [&](const std::string& o) {
            return o == "*" || o == origin;
        });
    };
    // The preflight a browser sends before a JSON POST.
    http.Options(".*", [allowed](const httplib::Request& req, httplib::Response& res) {
        if (!allowed(req))
            return send_error(res, ApiError(403, "invalid_request_error",
                                            "origin " + quote_untrusted(req.get_header_value("Origin"), 64) +
                                                " is not allowed: start dqt serve with --allow-origin naming it"));
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Content-Type, Authorization");
        res.set_header("Access-Control-Max-Age", "600");
    });
    http.set_post_routing_handler([allowed](const httplib::Request& req, httplib::Response& res) {
        if (!allowed(req)) return;
        res.set_header("Access-Control-Allow-Origin", req.get_header_value("Origin"));
        res.set_header("Vary", "Origin");
    });
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

// Cancels a whole answer's streams when its handler returns: those still running when the
// client left or another failed stop generating (a finished one ignores it).
struct CancelOnExit {
    const std::vector<std::shared_ptr<RequestStream>>& streams;
    ~CancelOnExit() {
        for (const std::shared_ptr<RequestStream>& stream : streams) stream->cancel();
    }
};

// One update of a stream as server-sent events: its text chunk (with its tokens' logprobs when
// asked for, even before their text is shown), then at the end the final
// chunk (finish reason, usage) and "[DONE]"; an error as OpenAI's error object.
std::string server_sent_events(const CompletionCall& call, const std::string& id, const std::string& model_name,
                               int64_t created, const StreamUpdate& update, bool& first) {
    const auto event = [](const nlohmann::json& data) { return "data: " + dump_json(data) + "\n\n"; };
    if (!update.error.empty()) return event(ApiError(500, "server_error", update.error).body()) + "data: [DONE]\n\n";
    std::string events;
    if (!update.text.empty() || !update.logprobs.empty()) {
        events += event(completion_chunk(call, id, model_name, created, update.text, update.logprobs, nullptr, first));
        first = false;
    }
    if (update.done) {
        events += event(completion_chunk(call, id, model_name, created, "", {}, &update, first)) + "data: [DONE]\n\n";
        first = false;
    }
    return events;
}

}  // namespace

ApiServer::ApiServer(Engine& engine, const Tokenizer& tokenizer, SpecialTokens special, std::string model_name,
                     const std::vector<std::string>& allowed_origins)
    : engine_(engine),
      tokenizer_(tokenizer),
      special_(std::move(special)),
      model_name_(std::move(model_name)),
      http_(std::make_unique<httplib::Server>()) {
    httplib::Server& http = *http_;
    // One handler thread per request a client may hold open, every slot and queue place, and
    // the spares.
    const size_t handlers = static_cast<size_t>(engine.parallel() + engine.queue_limit()) + kSpareHandlers;
    http.new_task_queue = [handlers] { return new httplib::ThreadPool(handlers); };
    http.set_payload_max_length(kBodyLimit);
    http.set_keep_alive_timeout(kKeepAliveSeconds);
    // The listening socket (the first that cpp-httplib sets up), kept to widen its backlog after
    // bind: cpp-httplib listens with a backlog of 5.
    http.set_socket_options([this](int socket) {
        httplib::default_socket_options(socket);
        if (listening_socket_ < 0) listening_socket_ = socket;
    });

    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        send_json(res, 200, {{"status", "ok"}, {"slots", engine_.parallel()}, {"slots_busy", engine_.live()},
                             {"queued", engine_.waiting()}, {"cancelled", engine_.cancelled()}});
    });
    const nlohmann::json model_object = {{"id", model_name_},
                                         {"object", "model"},
                                         {"created", 0},
                                         {"owned_by", "dqt"},
                                         {"context_length", engine_.context()}};
    http.Get("/v1/models", [model_object](const httplib::Request&, httplib::Response& res) {
        send_json(res, 200, {{"object", "list"}, {"data", nlohmann::json::array({model_object})}});
    });
    // OpenAI's "retrieve model" (client.models.retrieve(id)).
    http.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req, httplib::Response& res) {
        if (req.matches[1] == model_name_) return send_json(res, 200, model_object);
        send_error(res, unknown_model(req.matches[1], model_name_));
    });
    allow_origins(http, allowed_origins);
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res,
                                  const httplib::ContentReader& reader) {
        try {
            const nlohmann::json body = parse_object(read_body(req, res, reader));
            const auto content = body.find("content");
            if (content == body.end() || !content->is_string())
                throw ApiError(400, "invalid_request_error", "'content' is required and must be a string", "content");
            send_json(res, 200, {{"tokens", tokenizer_.encode(content->get<std::string>())}});
        } catch (const ApiError& e) {
            send_error(res, e);
        }
    });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader& reader) {
        try {
            const nlohmann::json body = parse_object(read_body(req, res, reader));
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
        return [this, chat](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
            try {
                auto call = std::make_shared<CompletionCall>(parse_completion_request(
                    read_body(req, res, reader), chat, model_name_, tokenizer_, special_, engine_));
                const std::vector<std::shared_ptr<RequestStream>> streams = engine_.submit_all(call->generations);
                if (streams.empty())
                    throw ApiError(503, "server_busy",
                                   "every slot is busy and the queue is full: retry after a moment");
                const std::string id = next_id(chat);
                const int64_t created = unix_seconds();
                if (!call->stream) {
                    const CancelOnExit cancel_unfinished{streams};
                    const ClientConnection client(req);
                    std::vector<ChoiceResult> results(streams.size());
                    for (size_t i = 0; i < streams.size(); ++i) {
                        ChoiceResult& result = results[i];
                        do {
                            if (client.gone()) return;
                            if (!streams[i]->next(result.end, kPoll)) continue;
                            if (!result.end.error.empty()) throw ApiError(500, "server_error", result.end.error);
                            result.text += result.end.text;
                            result.logprobs.insert(result.logprobs.end(), result.end.logprobs.begin(),
                                                   result.end.logprobs.end());
                        } while (!result.end.done);
                    }
                    send_json(res, 200, completion_response(*call, id, model_name_, created, results));
                    return;
                }
                const std::shared_ptr<RequestStream> stream = streams.front();  // a stream has one prompt
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
        std::string message;
        switch (res.status) {
            case 404: message = "no route " + req.method + " " + quote_untrusted(req.path, 64); break;
            case 400: message = "a malformed HTTP request"; break;
            case 413: message = "the request is over the server's limits"; break;
            case 414: message = "the request's path and query are too long"; break;
            default: message = "the request could not be served (HTTP " + std::to_string(res.status) + ")";
        }
        send_json(res, res.status, ApiError(res.status, "invalid_request_error", message).body());
    });
}

ApiServer::~ApiServer() = default;

int ApiServer::bind(const std::string& host, int port) {
    const int bound = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
    require(bound > 0, "cannot listen on " + host + ":" + std::to_string(port) +
                           " (in use, or not an address of this machine): choose another --host or --port");
    // Listening again sets the backlog (Linux): a burst of connections waits to be accepted
    // rather than being dropped and retried by the clients' TCP seconds later.
    if (listening_socket_ >= 0) ::listen(listening_socket_, SOMAXCONN);
    return bound;
}

void ApiServer::serve() { http_->listen_after_bind(); }

void ApiServer::stop() { http_->stop(); }

}  // namespace dqt
