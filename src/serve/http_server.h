#pragma once
// `dqt serve`'s HTTP side (cpp-httplib): the OpenAI-style routes over an Engine.
//   POST /v1/completions, POST /v1/chat/completions  (stream: server-sent events)
//   GET /v1/models, GET /v1/models/{id}, GET /health, POST /tokenize, POST /detokenize
// Every malformed request gets an OpenAI-style JSON error with a 4xx status; a request that
// finds every slot busy and the queue full gets 503 with Retry-After. A client that
// disconnects, mid-stream or while waiting for a whole answer, cancels its generation, freeing
// the slot.
#include <memory>
#include <string>
#include <vector>

#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "serve/engine.h"

namespace httplib {
class Server;
}

namespace dqt {

class ApiServer {
public:
    // model_name: the id /v1/models lists and requests may name. allowed_origins: the browser
    // origins answered with CORS headers ("*": any; none: no CORS).
    ApiServer(Engine& engine, const Tokenizer& tokenizer, SpecialTokens special, std::string model_name,
              const std::vector<std::string>& allowed_origins = {});
    ~ApiServer();
    // Binds host:port (port 0: any free port); dqt::Error naming the address when it cannot.
    // Returns the bound port.
    int bind(const std::string& host, int port);
    // Serves until stop() (from another thread or a signal handler's thread).
    void serve();
    void stop();

private:
    Engine& engine_;
    const Tokenizer& tokenizer_;
    const SpecialTokens special_;
    const std::string model_name_;
    std::unique_ptr<httplib::Server> http_;
    int listening_socket_ = -1;
};

}  // namespace dqt
