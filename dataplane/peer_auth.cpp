// Authentication of gateway-to-gateway messages: HMAC-SHA256, the anti-replay window, the sequence clock.

// SHA256_Init/Update/Final and SHA256_CTX are deprecated in OpenSSL 3, but they are the only way to
// keep HMAC's precomputed key states in a plain struct that a message copies and finishes without
// allocating; EVP_MD_CTX_new/EVP_MAC_CTX_dup allocate on every message. Asking for the 1.1.1 API
// keeps them declared without deprecation warnings (the build uses -Werror). This file only.
#define OPENSSL_API_COMPAT 0x10101000L
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "dataplane/peer_auth.hpp"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace fedgate {
namespace {

constexpr std::size_t kBlock = 64;  // SHA-256 block size
static_assert(SHA256_DIGEST_LENGTH == kMacLen);
static_assert(sizeof(SHA256_CTX) == sizeof(HmacKey::Sha256State));
static_assert(alignof(SHA256_CTX) <= alignof(HmacKey::Sha256State));

SHA256_CTX load(const HmacKey::Sha256State& s) {
    SHA256_CTX c;
    std::memcpy(&c, s.bytes, sizeof c);
    return c;
}

HmacKey::Sha256State padded_key_state(const uint8_t (&key)[kBlock], uint8_t pad) {
    uint8_t block[kBlock];
    for (std::size_t i = 0; i < kBlock; ++i) block[i] = key[i] ^ pad;
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, block, kBlock);
    HmacKey::Sha256State s;
    std::memcpy(s.bytes, &c, sizeof c);
    OPENSSL_cleanse(block, sizeof block);
    OPENSSL_cleanse(&c, sizeof c);
    return s;
}

}  // namespace

HmacKey::HmacKey(std::span<const uint8_t> key) {
    uint8_t k[kBlock] = {};
    if (key.size() > kBlock) {
        SHA256(key.data(), key.size(), k);
    } else if (!key.empty()) {
        std::memcpy(k, key.data(), key.size());
    }
    inner_ = padded_key_state(k, 0x36);
    outer_ = padded_key_state(k, 0x5c);
    OPENSSL_cleanse(k, sizeof k);
}

HmacKey::~HmacKey() {
    OPENSSL_cleanse(&inner_, sizeof inner_);
    OPENSSL_cleanse(&outer_, sizeof outer_);
}

void HmacKey::sign(std::span<const uint8_t> data, uint8_t out[kMacLen]) const {
    SHA256_CTX c = load(inner_);
    SHA256_Update(&c, data.data(), data.size());
    uint8_t inner_hash[kMacLen];
    SHA256_Final(inner_hash, &c);
    c = load(outer_);
    SHA256_Update(&c, inner_hash, sizeof inner_hash);
    SHA256_Final(out, &c);
}

bool HmacKey::verify(std::span<const uint8_t> data, std::span<const uint8_t> mac) const {
    if (mac.size() != kMacLen) return false;
    uint8_t expect[kMacLen];
    sign(data, expect);
    return CRYPTO_memcmp(expect, mac.data(), kMacLen) == 0;
}

void HmacKey::seal(std::span<uint8_t> datagram) const {
    if (datagram.size() < kMacLen) return;
    const std::size_t covered = datagram.size() - kMacLen;
    sign(datagram.first(covered), datagram.data() + covered);
}

// ---------------------------------------------------------------------------------------------

namespace {

std::array<uint8_t, SHA256_DIGEST_LENGTH> key_digest(std::span<const uint8_t> key) {
    static constexpr char kDomain[] = "fedgate peer key";  // with its NUL: the key starts after it
    SHA256_CTX c;
    SHA256_Init(&c);
    SHA256_Update(&c, kDomain, sizeof kDomain);
    SHA256_Update(&c, key.data(), key.size());
    std::array<uint8_t, SHA256_DIGEST_LENGTH> d;
    SHA256_Final(d.data(), &c);
    OPENSSL_cleanse(&c, sizeof c);
    return d;
}

}  // namespace

std::string key_fingerprint(std::span<const uint8_t> key) {
    static constexpr char kHex[] = "0123456789abcdef";
    const auto d = key_digest(key);
    std::string out;
    for (std::size_t i = 0; i < 8; ++i) {
        if (i != 0 && i % 2 == 0) out += ':';
        out += kHex[d[i] >> 4];
        out += kHex[d[i] & 15];
    }
    return out;
}

uint8_t derived_key_id(std::span<const uint8_t> key) {
    const auto d = key_digest(key);
    return static_cast<uint8_t>(1 + d[8] % 255);  // a byte the fingerprint does not show
}

PeerKeys::PeerKeys(Key current, Key next)
    : current_(current.bytes), current_id_(current.id), next_id_(next.bytes.empty() ? 0 : next.id) {
    if (current.id == 0) throw std::invalid_argument("a peer key's ID must be 1-255");
    if (!next.bytes.empty()) {
        if (next.id == 0) throw std::invalid_argument("a peer key's ID must be 1-255");
        if (next.id == current.id) throw std::invalid_argument("the next key has the current key's ID");
        next_.emplace(next.bytes);
    }
}

PeerKeys::PeerKeys(Key current) : PeerKeys(current, Key{}) {}

void PeerKeys::seal(std::span<uint8_t> datagram) const {
    if (datagram.size() < sizeof(MsgHeader) + kMacLen) return;
    datagram[kKeyIdOffset] = current_id_;
    current_.seal(datagram);
}

// ---------------------------------------------------------------------------------------------

const char* replay_verdict_name(ReplayVerdict v) {
    switch (v) {
    case ReplayVerdict::ok: return "ok";
    case ReplayVerdict::replayed: return "replayed";
    case ReplayVerdict::too_old: return "too_old";
    case ReplayVerdict::stale: return "stale";
    case ReplayVerdict::future: return "future";
    }
    return "?";
}

ReplayWindow::ReplayWindow(uint64_t start_seq) : top_(start_seq) {
    if (start_seq != 0) bits_.fill(~uint64_t{0});
}

bool ReplayWindow::seen(uint64_t seq) const {
    const uint64_t i = top_ - seq;
    return bits_[i / 64] >> (i % 64) & 1;
}

ReplayVerdict ReplayWindow::check(uint64_t seq, uint64_t now_ns, uint64_t max_skew_ns) const {
    // Saturating bounds: a clock near either end of the range must not wrap into accepting.
    const uint64_t newest = now_ns > UINT64_MAX - max_skew_ns ? UINT64_MAX : now_ns + max_skew_ns;
    const uint64_t oldest = now_ns < max_skew_ns ? 0 : now_ns - max_skew_ns;
    if (seq > newest) return ReplayVerdict::future;
    if (seq < oldest) return ReplayVerdict::stale;
    if (seq > top_) return ReplayVerdict::ok;
    if (top_ - seq >= kWindow) return ReplayVerdict::too_old;
    return seen(seq) ? ReplayVerdict::replayed : ReplayVerdict::ok;
}

void ReplayWindow::accept(uint64_t seq) {
    if (seq <= top_) {
        const uint64_t i = top_ - seq;
        if (i < kWindow) bits_[i / 64] |= uint64_t{1} << (i % 64);
        return;
    }
    const uint64_t shift = seq - top_;
    top_ = seq;
    if (shift >= kWindow) {
        bits_.fill(0);
    } else {
        // Move every bit i to i + shift: whole words first, then the bits within them.
        const std::size_t ws = shift / 64;
        const unsigned bs = shift % 64;
        for (std::size_t w = kWords; w-- > 0;) {
            uint64_t v = 0;
            if (w >= ws) {
                v = bits_[w - ws] << bs;
                if (bs != 0 && w > ws) v |= bits_[w - ws - 1] >> (64 - bs);
            }
            bits_[w] = v;
        }
    }
    bits_[0] |= 1;
}

// ---------------------------------------------------------------------------------------------

uint64_t SeqClock::next(uint64_t now_ns) {
    uint64_t last = last_.load(std::memory_order_relaxed);
    uint64_t v;
    do {
        v = std::max(last + 1, now_ns);
    } while (!last_.compare_exchange_weak(last, v, std::memory_order_relaxed));
    return v;
}

uint64_t SeqClock::realtime_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace fedgate
