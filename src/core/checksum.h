#pragma once
// CRC-32 (zlib's) over byte ranges: every file dqt writes carries one.
#include <cstddef>
#include <cstdint>

namespace dqt {

// Continues a running CRC-32: start with crc = 0.
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

}  // namespace dqt
