// Token buckets for the resolution service: how many broadcasts a requester (or the gateway as a
// whole) may start. Integer arithmetic, caller-supplied time; no allocation after construction.
#pragma once

#include <rte_jhash.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace fedgate {

// Holds up to `burst` tokens and gains `rate_per_s` a second; allow() spends one. Kept in
// milli-tokens so that any rate refills exactly: rate_per_s tokens/s is rate_per_s milli-tokens/ms.
// Starts full. Rate 0 or burst 0 never allows anything: that is how a configuration turns a kind
// of request off (a bucket that refills at 0 and spent its burst would do the same, but later).
// Time is the caller's millisecond clock; a clock that steps back refills nothing until it has
// caught up again. Single writer.
class TokenBucket {
public:
    TokenBucket() = default;  // never allows; for arrays that are filled in afterwards
    TokenBucket(uint32_t rate_per_s, uint32_t burst)
        : rate_(rate_per_s), capacity_(uint64_t{burst} * kMilli), tokens_(capacity_) {}

    bool allow(uint64_t now_ms) {
        if (rate_ == 0 || capacity_ == 0) return false;
        refill(now_ms);
        if (tokens_ < kMilli) return false;
        tokens_ -= kMilli;
        return true;
    }

    uint64_t milli_tokens() const { return tokens_; }  // for tests and stats

private:
    static constexpr uint64_t kMilli = 1000;

    void refill(uint64_t now_ms) {
        if (now_ms <= last_ms_) return;
        const uint64_t elapsed = now_ms - last_ms_;
        last_ms_ = now_ms;
        const uint64_t missing = capacity_ - tokens_;
        // Compare before multiplying: a long idle gap times the rate could overflow.
        tokens_ = elapsed >= missing / rate_ + 1 ? capacity_ : tokens_ + elapsed * rate_;
        if (tokens_ > capacity_) tokens_ = capacity_;
    }

    uint64_t rate_ = 0;  // milli-tokens per millisecond
    uint64_t capacity_ = 0;
    uint64_t tokens_ = 0;
    uint64_t last_ms_ = 0;
};

// One TokenBucket per requester, found by hashing the requester's IPv4 address into a fixed array
// (a power of two, chosen at construction). No entry is ever made or evicted: two requesters whose
// addresses hash alike share a bucket and their budget, so a collision errs on the side of limiting,
// never of letting more through. Size the array well above the number of requesters to keep that rare.
// Single writer (one per lcore).
class RequesterLimiter {
public:
    RequesterLimiter(std::size_t buckets, uint32_t rate_per_s, uint32_t burst, uint32_t seed = kDefaultSeed)
        : mask_(buckets - 1), seed_(seed) {
        if (buckets == 0 || !std::has_single_bit(buckets) || buckets > UINT32_MAX)
            throw std::invalid_argument("requester limiter: bucket count must be a power of two");
        buckets_ = std::make_unique<TokenBucket[]>(buckets);
        for (std::size_t i = 0; i < buckets; ++i) buckets_[i] = TokenBucket(rate_per_s, burst);
    }

    bool allow(uint32_t ipv4, uint64_t now_ms) { return buckets_[slot_of(ipv4)].allow(now_ms); }

    std::size_t slot_of(uint32_t ipv4) const { return rte_jhash_1word(ipv4, seed_) & mask_; }
    std::size_t size() const { return mask_ + 1; }

private:
    static constexpr uint32_t kDefaultSeed = 0x6a09e667;

    std::unique_ptr<TokenBucket[]> buckets_;
    std::size_t mask_;
    uint32_t seed_;
};

}  // namespace fedgate
