#include "core/checksum.h"

#include <libdeflate.h>

namespace dqt {

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
    // libdeflate (as zlib) answers a null buffer with the initial value 0: an empty range,
    // which may come with a null pointer, leaves the running value as it is instead.
    return bytes == 0 ? crc : libdeflate_crc32(crc, data, bytes);
}

}  // namespace dqt
