#include "data/byte_symbols.h"

#include <vector>

namespace dqt {

const std::string& gpt2_byte_symbol(int byte) {
    static const std::vector<std::string> symbols = [] {
        std::vector<std::string> table(256);
        int next = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
            const int code_point = printable ? b : 0x100 + next++;
            std::string utf8;
            if (code_point < 0x80) {
                utf8.push_back(static_cast<char>(code_point));
            } else {
                utf8.push_back(static_cast<char>(0xc0 | (code_point >> 6)));
                utf8.push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
            }
            table[b] = utf8;
        }
        return table;
    }();
    return symbols[static_cast<size_t>(byte)];
}

}  // namespace dqt
