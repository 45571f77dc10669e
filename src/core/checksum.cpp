#include "core/checksum.h"

#include <zlib.h>

#include <algorithm>

namespace dqt {

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
    const auto* cursor = static_cast<const Bytef*>(data);
    // zlib takes uInt lengths: feed large ranges in 1 GiB pieces.
    while (bytes > 0) {
        const size_t piece = std::min<size_t>(bytes, size_t{1} << 30);
        crc = static_cast<uint32_t>(::crc32(crc, cursor, static_cast<uInt>(piece)));
        cursor += piece;
        bytes -= piece;
    }
    return crc;
}

}  // namespace dqt
