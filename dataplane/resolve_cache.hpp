// The resolution cache: every DMA address record this gateway can answer with — its own processes'
// (local), those peers announced, those learned from query answers, and brief "not found" entries.
// The data-plane lcore reads it without locks; control threads write it, one at a time, and free
// what they replace only after an RCU grace period (classic RCU hash: chained buckets, new entries
// published at a bucket's head with a release store, unlinked entries retired, never changed in place).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dataplane/table_memory.hpp"
#include "proto/resolve_wire.hpp"

namespace fedgate {

enum class CacheKind : uint8_t {
    local = 0,      // a process registered with this gateway (the authoritative copy)
    announced = 1,  // a peer announced it; kept until withdrawn or the peer's stream starts over
    answered = 2,   // learned from a query answer; kept for the record's ttl
    negative = 3,   // every party said "not here"; kept briefly
};
const char* cache_kind_name(CacheKind k);
inline constexpr int kCacheKinds = 4;

// What a lookup and a reply built from it read come first, in the entry's first two cache lines
// (key, expiry, chain link, kind, the record's wire form and its sum); the decoded record, which
// only the control threads read, after them.
struct alignas(64) CacheEntry {
    ProcessId key;  // what it is found under: the record's ID, or the party-0 ID a broadcast answered
    uint64_t expires_ms = UINT64_MAX;  // on the lcore's millisecond clock; UINT64_MAX: no expiry
    std::atomic<CacheEntry*> next{nullptr};
    // `wire`'s one's-complement sum in memory order, folded (rte_raw_cksum's): a reply's checksum
    // adds it as it is. (Kept 32 bits wide, as the layout after it was measured.)
    uint32_t wire_sum = 0;
    uint16_t owner_party = 0;  // the party whose gateway vouched for it
    CacheKind kind = CacheKind::local;
    DmaAddressWire wire;  // the record as the wire carries it, encoded once at upsert
    DmaAddress record;    // unset for negative entries
};
static_assert(offsetof(CacheEntry, wire) + sizeof(DmaAddressWire) <= 128, "a hit reads the first two lines");

class ResolveCache {
public:
    // `capacity`: most entries held at once; the bucket array is the next power of two above it.
    explicit ResolveCache(uint32_t capacity);
    ~ResolveCache();
    ResolveCache(const ResolveCache&) = delete;
    ResolveCache& operator=(const ResolveCache&) = delete;

    // Reader side (the lcore, or any thread in an RCU read-side section). An expired entry counts
    // as absent. The pointer stays valid until the reader's next quiescent state.
    // Inline: a cache hit the data plane answers in place looks its target up here.
    [[gnu::always_inline]] const CacheEntry* find(ProcessId key, uint64_t now_ms) const {
        return find_from(buckets_[bucket(key)].load(std::memory_order_acquire), key, now_ms);
    }
    // find() from the entry a bucket held when prefetch_entry() read it (`first`, the same
    // reader-side section): the chain walked from there, the bucket not looked up again.
    [[gnu::always_inline]] static const CacheEntry* find_from(const CacheEntry* first, ProcessId key, uint64_t now_ms) {
        for (const CacheEntry* e = first; e != nullptr; e = e->next.load(std::memory_order_acquire)) {
            if (e->key == key) return e->expires_ms > now_ms ? e : nullptr;
        }
        return nullptr;
    }
    // Ahead of a find() of `key`, in two steps a burst's passes apart (the data plane's burst loop
    // does this for a burst's requests before it answers any): prefetch_bucket() the bucket's slot,
    // which it returns; once that is in, prefetch_entry() the first entry's two lines, which it
    // returns for find_from(). Neither changes anything.
    using Bucket = std::atomic<CacheEntry*>;
    const Bucket* prefetch_bucket(ProcessId key) const { return locator().prefetch_bucket(key); }
    // prefetch_bucket() from the bucket array's address and size, which stay as they are for the
    // cache's life: taken once for a burst, so that a burst's requests do not each load them again
    // through the resolver.
    struct Locator {
        const Bucket* buckets;
        unsigned bits;
        [[gnu::always_inline]] const Bucket* prefetch_bucket(ProcessId key) const {
            const Bucket* const b = &buckets[key.home(bits)];
            __builtin_prefetch(b);
            return b;
        }
    };
    Locator locator() const { return {buckets_.data(), bits_}; }
    static const CacheEntry* prefetch_entry(const Bucket* b) {
        const CacheEntry* const e = b->load(std::memory_order_acquire);
        if (e != nullptr) {
            __builtin_prefetch(e);
            __builtin_prefetch(reinterpret_cast<const char*>(e) + 64);
        }
        return e;
    }

    // Writer side: one writer at a time (the caller serialises). Entries unlinked here go on the
    // retired list; free them with reclaim() once no reader can still see them.
    enum class Upsert : uint8_t { inserted, replaced, full };
    Upsert upsert(ProcessId key, const DmaAddress& record, CacheKind kind, uint16_t owner, uint64_t expires_ms);
    bool remove(ProcessId key);
    // Removes every entry `pred` matches; returns how many.
    std::size_t remove_if(const std::function<bool(const CacheEntry&)>& pred);
    // Removes expired entries from the next `buckets` buckets after `*cursor` (which moves on, and
    // wraps): called on a timer, it sweeps the whole table in slices. Returns how many went.
    std::size_t sweep_expired(std::size_t* cursor, std::size_t buckets, uint64_t now_ms);
    std::size_t bucket_count() const { return mask_ + 1; }
    // Waits for readers with `synchronize` (e.g. rte_rcu_qsbr_synchronize), then frees the retired.
    void reclaim(const std::function<void()>& synchronize);
    std::size_t retired() const { return retired_.size(); }

    // Writer-side walk (no concurrent writer). Stops when `f` returns false.
    void for_each(const std::function<bool(const CacheEntry&)>& f) const;
    // Any thread.
    std::size_t size() const { return size_.load(std::memory_order_relaxed); }
    std::size_t size(CacheKind k) const { return by_kind_[static_cast<int>(k)].load(std::memory_order_relaxed); }
    std::size_t capacity() const { return capacity_; }
    static constexpr std::size_t entry_bytes() { return sizeof(CacheEntry) + sizeof(std::atomic<CacheEntry*>); }

private:
    std::size_t bucket(ProcessId key) const { return key.home(bits_); }
    void unlink(std::atomic<CacheEntry*>& link, CacheEntry* e);
    // Entries come from chunks of table memory (2 MB, on a huge page, once the cache is that
    // large), handed out in order and handed out again once reclaim() frees them.
    CacheEntry* new_entry();
    void free_entry(CacheEntry* e) { free_.push_back(e); }

    std::size_t capacity_;
    std::size_t mask_;
    unsigned bits_;  // buckets: 2^bits_ (mask_ + 1)
    FixedArray<std::atomic<CacheEntry*>> buckets_;
    struct ChunkRelease {
        void operator()(void* p) const { release_table_memory(p); }
    };
    std::size_t chunk_bytes_;  // kChunkBytes, or a small cache's capacity of entries
    std::vector<std::unique_ptr<void, ChunkRelease>> chunks_;
    std::size_t chunk_used_ = 0;     // entries of the last chunk handed out
    std::vector<CacheEntry*> free_;  // entries reclaim() freed, to hand out again
    std::atomic<std::size_t> size_{0};
    std::atomic<std::size_t> by_kind_[kCacheKinds] = {};
    std::vector<CacheEntry*> retired_;
};

}  // namespace fedgate
