#pragma once
// CRC-32 (zlib's and gzip's, computed by libdeflate) over byte ranges: every file dqt writes
// carries one.
#include <cstddef>
#include <cstdint>

namespace dqt {

// Continues a running CRC-32: start with crc = 0. An empty range (data may be null) changes nothing.
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

}  // namespace dqt
