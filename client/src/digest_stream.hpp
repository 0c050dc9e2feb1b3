// A checked byte stream over any Connection, for tools and tests: the sender sends an 8-byte
// big-endian length, that many pseudo-random bytes (from a seed, generated chunk by chunk, so any
// length fits in constant memory) and their SHA-256; the receiver hashes what arrived, compares, and
// answers with its own digest and one status byte (0: the digests match). Both sides know the verdict.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "fedgate/connection.hpp"

namespace fedgate {

using Sha256 = std::array<uint8_t, 32>;

struct StreamResult {
    uint64_t bytes = 0;       // payload bytes moved (as announced, once all arrived)
    double seconds = 0;       // from the first byte sent/received to the verdict
    bool digest_ok = false;   // the sender's and the receiver's digests are the same
    Sha256 local_digest{};    // what this side computed
    Sha256 peer_digest{};     // what the other side said it computed
    std::string error;        // non-empty: the stream broke before a verdict (peer gone, short)

    bool ok() const { return error.empty() && digest_ok; }
};

// Sends `bytes` bytes generated from `seed`, then waits for the receiver's verdict.
StreamResult send_digest_stream(Connection& c, uint64_t bytes, uint64_t seed);
// Receives one stream and answers it.
StreamResult receive_digest_stream(Connection& c);

std::string hex(const Sha256& d);

}  // namespace fedgate
