#include "data/eval_windows.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace dqt {

size_t eval_window_count(const Shard& shard, int seq, size_t max_tokens) {
    require(seq > 0, "sequence length must be positive");
    if (shard.token_count() == 0) return 0;
    size_t windows = (shard.token_count() - 1) / seq;  // each window needs seq + 1 tokens
    if (max_tokens > 0) windows = std::min(windows, max_tokens / seq);
    return windows;
}

void eval_window(const Shard& shard, size_t window_index, int seq, int32_t* inputs, int32_t* targets) {
    if (window_index >= eval_window_count(shard, seq, 0)) {
        throw Error("evaluation window " + std::to_string(window_index) + " is past the end of shard " + shard.path());
    }
    const size_t offset = window_index * seq;
    shard.read(offset, seq, inputs);
    shard.read(offset + 1, seq, targets);
}

}  // namespace dqt
