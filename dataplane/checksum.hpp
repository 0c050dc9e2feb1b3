// Incremental Internet checksum update (RFC 1624, eqn. 3): when a 16-bit word of a checksummed
// header changes from `old_word` to `new_word`, the checksum changes without re-reading the data.
// The NAT rewrites build their per-session deltas from the same arithmetic.
#pragma once

#include <cstdint>

namespace fedgate {

// All values in the same byte order (whatever order the words are stored in).
constexpr uint16_t checksum_adjust(uint16_t checksum, uint16_t old_word, uint16_t new_word) {
    uint32_t sum = static_cast<uint16_t>(~checksum) + static_cast<uint32_t>(static_cast<uint16_t>(~old_word)) + new_word;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
}

}  // namespace fedgate
