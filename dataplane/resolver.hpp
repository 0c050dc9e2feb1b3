// The resolution fast path of one lcore: answers resolve requests from the cache, and on a miss
// keeps a small pending table of queries to peer gateways (directed to the owner's gateway, or
// broadcast to all), folds duplicate requests for the same target into one query, relays the first
// good answer to every waiter, times queries out, and rate-limits broadcasts per requester and in
// total. Pure: packets in and out go through ResolverIo, time is passed in. Never allocates after
// construction.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/counters.hpp"
#include "dataplane/rate_limiter.hpp"
#include "dataplane/resolve_cache.hpp"
#include "proto/resolve_wire.hpp"

namespace fedgate {

inline constexpr uint32_t kDefaultPendingQueries = 1024;
inline constexpr uint32_t kDefaultQueryTimeoutMs = 1000;
inline constexpr uint32_t kDefaultBroadcastRate = 200;       // per second, all requesters together
inline constexpr uint32_t kDefaultBroadcastBurst = 50;
inline constexpr uint32_t kDefaultRequesterBroadcastRate = 20;  // per second, per requester address
inline constexpr uint32_t kDefaultRequesterBroadcastBurst = 10;
inline constexpr int kMaxPeers = 64;  // peers are a bit mask in the pending table
inline constexpr int kMaxWaiters = 8;  // requests folded onto one pending query

struct ResolverConfig {
    uint16_t party_id = 0;
    uint32_t pending_capacity = kDefaultPendingQueries;
    uint32_t query_timeout_ms = kDefaultQueryTimeoutMs;
    uint32_t broadcast_rate = kDefaultBroadcastRate;
    uint32_t broadcast_burst = kDefaultBroadcastBurst;
    uint32_t requester_broadcast_rate = kDefaultRequesterBroadcastRate;
    uint32_t requester_broadcast_burst = kDefaultRequesterBroadcastBurst;
    std::vector<uint16_t> peer_parties;  // index = peer index used in ResolverIo::query
    uint8_t query_tag = 0;  // the top byte of every query ID (the data-plane worker's index)
};

// Who asked: where the reply goes. `control` marks a request from this gateway's own control
// threads (fedgatectl resolve); its reply goes back through ResolverIo::reply as well.
struct Requester {
    uint32_t ip = 0;  // network order
    uint16_t port = 0;  // network order
    uint16_t in_port = 0;  // the gateway port it came in on
    uint64_t request_id = 0;
    void* control = nullptr;
};

class ResolverIo {
public:
    virtual ~ResolverIo() = default;
    // `record` is null unless status is ok.
    virtual void reply(const Requester& r, ProcessId target, ResolveStatus status, AnswerSource source,
                       const DmaAddress* record) = 0;
    // A cache hit: the entry carries its record already encoded, which a packet engine can copy.
    virtual void reply_hit(const Requester& r, ProcessId target, AnswerSource source, const CacheEntry& e) {
        reply(r, target, ResolveStatus::ok, source, &e.record);
    }
    virtual void query(int peer, uint64_t query_id, ProcessId target, QueryMode mode) = 0;
    // What the cache should learn (control threads write it): a record, or "not found" (null).
    virtual void learned(ProcessId key, const DmaAddress* record, uint16_t owner_party) = 0;
};

struct ResolverCounters {
    Counter requests, hits, negative_hits, misses, folded, directed, broadcast, answered, not_found, timed_out,
        refused_rate, refused_busy, bad_requests, answers_unmatched, queries_answered_found, queries_answered_no;
};

class Resolver {
public:
    Resolver(const ResolverConfig& cfg, const ResolveCache& cache, ResolverIo& io);

    // A compute process (or the control threads) asks for `target`.
    void request(const Requester& r, ProcessId target, uint64_t now_ms);
    // What the cache answers `target` with at once, as request() answers it: the entry (a "not
    // found" one included) and the source the reply names; a null entry when the cache cannot
    // answer and request() goes on to the pending table and the peers.
    struct CacheAnswer {
        const CacheEntry* entry = nullptr;
        AnswerSource source = AnswerSource::cache;
    };
    CacheAnswer cache_answer(ProcessId target, uint64_t now_ms) const;
    // request() for a caller that writes the reply itself (a data-plane worker answering in the
    // request's own packet): when the cache holds a record for `target`, returns the entry;
    // otherwise a null entry, and the caller makes the request() instead. Counts nothing: the
    // caller counts its hits with count_hits() (a burst's at once).
    // `first`: prefetch_entry()'s entry for the target's bucket, read in this reader-side section.
    CacheAnswer request_hit(ProcessId target, const CacheEntry* first, uint64_t now_ms);
    // `n` requests answered from request_hit()'s entries: counted as request() counts a hit.
    void count_hits(uint64_t n) {
        counters_.requests.add(n);
        counters_.hits.add(n);
    }
    // A request for `target` comes soon: its cache entry prefetched, in two steps (ResolveCache).
    // cache_locator().prefetch_bucket() returns a target's bucket, for prefetch_entry(); that
    // returns its first entry, for request_hit().
    ResolveCache::Locator cache_locator() const { return cache_.locator(); }
    static const CacheEntry* prefetch_entry(const ResolveCache::Bucket* b) { return ResolveCache::prefetch_entry(b); }
    // A peer (index) answered query `query_id`; `record` null means "not here".
    void answer(int peer, uint64_t query_id, ProcessId target, const DmaAddress* record, uint64_t now_ms);
    // A peer asks us. Returns the local record that answers it, or null ("not here").
    const CacheEntry* lookup_for_peer(ProcessId target, uint64_t now_ms);
    // Times out queries past their deadline. Call often (every few ms is plenty).
    void expire(uint64_t now_ms);

    const ResolverCounters& counters() const { return counters_; }
    uint32_t pending() const { return pending_count_; }
    int peer_index(uint16_t party) const;  // -1 if not a peer
    // A new peer list (a reload): swapped with `parties`, which gets the old one back, so nothing is
    // allocated. Pending queries keep the peers that stay (re-indexed); answers from removed peers
    // no longer match, and a query left asking no one times out as usual.
    void set_peers(std::vector<uint16_t>& parties);

private:
    // The answer an entry the cache found under the target itself gives (null: none).
    static CacheAnswer answer_of(const CacheEntry* e) {
        if (e == nullptr) return {};
        if (e->kind == CacheKind::negative) return {e, AnswerSource::negative_cache};
        return {e, e->kind == CacheKind::local ? AnswerSource::local : AnswerSource::cache};
    }
    struct Pending {
        ProcessId target;
        uint64_t query_id = 0;  // 0: slot free
        uint64_t deadline_ms = 0;
        uint64_t asked = 0;     // peers asked (bit per peer index)
        uint64_t said_no = 0;   // peers that answered "not here"
        QueryMode mode = QueryMode::directed;
        uint8_t nwaiters = 0;
        std::array<Requester, kMaxWaiters> waiters;
    };

    void finish(uint32_t slot, ResolveStatus status, AnswerSource source, const DmaAddress* record);
    void broadcast(Pending& p, uint64_t now_ms);
    uint32_t find_pending(ProcessId target) const;  // slot, or UINT32_MAX
    void index_insert(uint32_t slot);
    void index_erase(uint32_t slot);
    std::size_t index_home(ProcessId target) const;

    ResolverConfig cfg_;
    const ResolveCache& cache_;
    ResolverIo& io_;
    std::unique_ptr<Pending[]> slots_;
    std::vector<uint32_t> free_;  // free slot numbers (a stack; reserved at construction)
    // Open-addressing index target -> slot+1 (0: empty), twice the slots, backward-shift deletion.
    std::unique_ptr<uint32_t[]> index_;
    std::size_t index_mask_ = 0;
    unsigned index_bits_ = 1;  // index_mask_ + 1 is 2^index_bits_
    uint32_t pending_count_ = 0;
    uint64_t next_query_gen_ = 1;
    TokenBucket total_broadcasts_;
    RequesterLimiter requester_broadcasts_;
    uint64_t all_peers_ = 0;
    ResolverCounters counters_;
};

// Inline: a cache hit the data plane answers in place goes through both, once per request.

[[gnu::always_inline]] inline Resolver::CacheAnswer Resolver::cache_answer(ProcessId target, uint64_t now_ms) const {
    // Owner unknown, but perhaps it is one of ours: the local directory answers before any peer, and
    // before anything cached under the party-0 ID itself (a stale "not found", another party's answer).
    if (target.party() == 0) {
        if (const CacheEntry* e = cache_.find(target.with_party(cfg_.party_id), now_ms);
            e != nullptr && e->kind == CacheKind::local)
            return {e, AnswerSource::local};
    }
    return answer_of(cache_.find(target, now_ms));
}

[[gnu::always_inline]] inline Resolver::CacheAnswer Resolver::request_hit(ProcessId target, const CacheEntry* first,
                                                                           uint64_t now_ms) {
    if (target.value == 0) return {};
    // A party-0 ID looks up our own party's first (cache_answer), in another bucket than `first`'s.
    const CacheAnswer a = target.party() == 0 ? cache_answer(target, now_ms)
                                              : answer_of(ResolveCache::find_from(first, target, now_ms));
    if (a.entry == nullptr || a.entry->kind == CacheKind::negative) return {};
    return a;
}

}  // namespace fedgate
