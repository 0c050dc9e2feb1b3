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
#include <span>

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
