// Authentication of gateway-to-gateway messages: HMAC-SHA256 with per-peer keys, the anti-replay
// window per (peer, channel), and the sequence clock that stamps outgoing messages.
//
// The data-plane lcore verifies every peer message, so after construction nothing here allocates,
// blocks, throws or locks.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "proto/resolve_wire.hpp"

namespace fedgate {

// HMAC-SHA256 (RFC 2104) with the key's padded inner and outer SHA-256 states computed once, so a
// message costs two SHA-256 passes from a copied state and nothing else.
class HmacKey {
public:
    // Any length, empty included (RFC 2104); keys longer than the 64-byte SHA-256 block are hashed
    // first. Refusing weak keys is the config's job.
    explicit HmacKey(std::span<const uint8_t> key);
    HmacKey(const HmacKey&) = default;
    HmacKey& operator=(const HmacKey&) = default;
    ~HmacKey();  // wipes the key-derived states

    void sign(std::span<const uint8_t> data, uint8_t out[kMacLen]) const;
    // Constant-time comparison; a MAC that is not exactly kMacLen bytes long fails.
    bool verify(std::span<const uint8_t> data, std::span<const uint8_t> mac) const;
    // Writes the MAC of all but the last kMacLen bytes into the last kMacLen bytes (an encoded
    // peer message whose trailer is still blank). A datagram shorter than kMacLen is left alone.
    void seal(std::span<uint8_t> datagram) const;

    // Opaque storage for OpenSSL's SHA256_CTX, whose definition the .cpp alone may see (it is
    // deprecated API there; the .cpp checks this size and alignment).
    struct alignas(8) Sha256State {
        unsigned char bytes[112];
    };

private:
    Sha256State inner_;  // after hashing key ^ ipad
    Sha256State outer_;  // after hashing key ^ opad
};

// A key's short fingerprint, for people to compare over the phone without reading the key:
// the first 8 bytes of SHA-256("fedgate peer key\0" || key) as four groups of hex ("1a2b:3c4d:5e6f:7081").
std::string key_fingerprint(std::span<const uint8_t> key);
// The key ID a key gets when the config gives none: 1-255, from the same hash as the fingerprint,
// so both gateways of a pair derive the same ID from the same key.
uint8_t derived_key_id(std::span<const uint8_t> key);

// The keys of one peer: the current one, which every message to it is sealed with, and, during a
// rotation, the next one, accepted beside it. Each has an ID (1-255) that the sender writes into
// the header (MsgHeader::key_id), so the receiver checks the one MAC the ID names.
// After construction nothing allocates.
class PeerKeys {
public:
    struct Key {
        std::span<const uint8_t> bytes;
        uint8_t id = 0;
    };
    // A next key with no bytes is none. Throws std::invalid_argument for an ID of 0 or a next key
    // with the current key's ID.
    PeerKeys(Key current, Key next);
    explicit PeerKeys(Key current);  // no next key

    // Writes the current key's ID into the header, then the MAC of all but the last kMacLen bytes
    // into the last kMacLen bytes (an encoded peer message whose trailer is still blank). A
    // datagram too short to hold a header and a MAC is left alone.
    void seal(std::span<uint8_t> datagram) const;
    // The key a received message names (its header's key_id): current or next; null for any other.
    const HmacKey* find(uint8_t id) const {
        if (id == current_id_) return &current_;
        if (next_ && id == next_id_) return &*next_;
        return nullptr;
    }
    uint8_t current_id() const { return current_id_; }
    uint8_t next_id() const { return next_ ? next_id_ : 0; }

private:
    HmacKey current_;
    std::optional<HmacKey> next_;
    uint8_t current_id_;
    uint8_t next_id_;
};

// What ReplayWindow::check thinks of a sequence number.
enum class ReplayVerdict : uint8_t {
    ok,
    replayed,  // accepted before
    too_old,   // below the window: cannot tell whether it was seen, so it is refused
    stale,     // older than now - max_skew
    future,    // newer than now + max_skew
};
const char* replay_verdict_name(ReplayVerdict v);

// Anti-replay state of one (peer, channel): the highest accepted sequence number and a bitmap of
// the kWindow numbers at and below it (RFC 4303 appendix A, with a 1024-bit window). Sequence
// numbers are the sender's nanosecond clock, so the window spans about a microsecond of the
// sender's time: it absorbs reordering among messages stamped in the same burst, and anything
// that arrives later than that behind a newer message is refused as too_old.
//
// The caller checks, verifies the MAC, and only then accepts, so a forged message never moves the
// window. Single writer (the lcore that owns the peer); no allocation.
class ReplayWindow {
public:
    static constexpr uint64_t kWindow = 1024;

    // A fresh window accepts any sequence number. `start_seq` > 0 makes it behave as if everything
    // up to and including start_seq had been seen: a receiver that starts with its own clock here
    // refuses replays of messages from before its restart.
    ReplayWindow() = default;
    explicit ReplayWindow(uint64_t start_seq);

    // Checks in this order: future, stale, too_old, replayed. Does not change the window.
    ReplayVerdict check(uint64_t seq, uint64_t now_ns, uint64_t max_skew_ns) const;
    // Records seq as seen. Call only for a message that check() passed and whose MAC verified;
    // a seq below the window is ignored.
    void accept(uint64_t seq);

    uint64_t highest() const { return top_; }

private:
    static constexpr std::size_t kWords = kWindow / 64;
    bool seen(uint64_t seq) const;  // seq within [top_ - kWindow + 1, top_]

    uint64_t top_ = 0;
    // Bit i (word i / 64, bit i % 64) is set when top_ - i has been accepted.
    std::array<uint64_t, kWords> bits_{};
};

// The sender's anti-replay sequence for one channel: nanoseconds since the Unix epoch, strictly
// increasing however many threads call it and however the wall clock steps (a step back just
// counts on from the last value until the clock catches up).
class SeqClock {
public:
    // max(last + 1, now_ns), claimed atomically: no two callers ever get the same value.
    uint64_t next(uint64_t now_ns);
    uint64_t next() { return next(realtime_ns()); }

    static uint64_t realtime_ns();  // CLOCK_REALTIME (vDSO: no syscall on the hot path)

private:
    static_assert(std::atomic<uint64_t>::is_always_lock_free);
    std::atomic<uint64_t> last_{0};
};

}  // namespace fedgate
