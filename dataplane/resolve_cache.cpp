// The resolution cache: lock-free reads, single-writer updates, RCU-deferred frees.
#include "dataplane/resolve_cache.hpp"

#include "dataplane/checksum.hpp"

#include <algorithm>
#include <bit>
#include <new>
#include <type_traits>

namespace fedgate {

const char* cache_kind_name(CacheKind k) {
    switch (k) {
    case CacheKind::local: return "local";
    case CacheKind::announced: return "announced";
    case CacheKind::answered: return "answered";
    case CacheKind::negative: return "negative";
    }
    return "?";
}

namespace {
// A chunk is 2 MB, one huge page (allocate_table_memory advises those from 2 MB up), when the
// cache is that large; a small cache's chunk holds its capacity.
constexpr std::size_t kChunkBytes = 2u << 20;
}  // namespace

ResolveCache::ResolveCache(uint32_t capacity)
    : capacity_(capacity),
      mask_(std::bit_ceil(std::max<std::size_t>(capacity, 16)) - 1),
      bits_(static_cast<unsigned>(std::countr_zero(mask_ + 1))),
      buckets_(mask_ + 1),
      chunk_bytes_(std::min(kChunkBytes, (mask_ + 1) * sizeof(CacheEntry))) {}

// Entries are trivially destructible: the chunks go with the cache.
static_assert(std::is_trivially_destructible_v<CacheEntry>);
ResolveCache::~ResolveCache() = default;

CacheEntry* ResolveCache::new_entry() {
    if (!free_.empty()) {
        CacheEntry* e = free_.back();
        free_.pop_back();
        return new (e) CacheEntry;
    }
    if (chunks_.empty() || chunk_used_ == chunk_bytes_ / sizeof(CacheEntry)) {
        chunks_.emplace_back(allocate_table_memory(chunk_bytes_));
        chunk_used_ = 0;
    }
    return new (static_cast<CacheEntry*>(chunks_.back().get()) + chunk_used_++) CacheEntry;
}

void ResolveCache::unlink(std::atomic<CacheEntry*>& link, CacheEntry* e) {
    // Readers already past `link` keep walking from e, whose next still leads on: unchanged.
    link.store(e->next.load(std::memory_order_relaxed), std::memory_order_release);
    size_.fetch_sub(1, std::memory_order_relaxed);
    by_kind_[static_cast<int>(e->kind)].fetch_sub(1, std::memory_order_relaxed);
    retired_.push_back(e);
}

ResolveCache::Upsert ResolveCache::upsert(ProcessId key, const DmaAddress& record, CacheKind kind, uint16_t owner,
                                          uint64_t expires_ms) {
    std::atomic<CacheEntry*>& head = buckets_[bucket(key)];
    // Find the old entry and the link that points at it before publishing the new one.
    std::atomic<CacheEntry*>* link = &head;
    CacheEntry* old = head.load(std::memory_order_relaxed);
    while (old != nullptr && old->key != key) {
        link = &old->next;
        old = old->next.load(std::memory_order_relaxed);
    }
    if (old == nullptr && size() >= capacity_) return Upsert::full;

    CacheEntry* e = new_entry();
    e->key = key;
    e->record = record;
    encode(record, e->wire);
    e->wire_sum = fold_sum(raw_sum(reinterpret_cast<const uint8_t*>(&e->wire), sizeof e->wire));
    e->expires_ms = expires_ms;
    e->owner_party = owner;
    e->kind = kind;
    e->next.store(head.load(std::memory_order_relaxed), std::memory_order_relaxed);
    head.store(e, std::memory_order_release);  // from here readers find the new entry first
    size_.fetch_add(1, std::memory_order_relaxed);
    by_kind_[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
    if (old == nullptr) return Upsert::inserted;
    if (link == &head) link = &e->next;  // the old entry was the head: it now hangs off the new one
    unlink(*link, old);
    return Upsert::replaced;
}

bool ResolveCache::remove(ProcessId key) {
    std::atomic<CacheEntry*>* link = &buckets_[bucket(key)];
    for (CacheEntry* e = link->load(std::memory_order_relaxed); e != nullptr; e = link->load(std::memory_order_relaxed)) {
        if (e->key == key) {
            unlink(*link, e);
            return true;
        }
        link = &e->next;
    }
    return false;
}

std::size_t ResolveCache::remove_if(const std::function<bool(const CacheEntry&)>& pred) {
    std::size_t n = 0;
    for (std::size_t b = 0; b <= mask_; ++b) {
        std::atomic<CacheEntry*>* link = &buckets_[b];
        for (CacheEntry* e = link->load(std::memory_order_relaxed); e != nullptr;
             e = link->load(std::memory_order_relaxed)) {
            if (pred(*e)) {
                unlink(*link, e);
                ++n;
            } else {
                link = &e->next;
            }
        }
    }
    return n;
}

std::size_t ResolveCache::sweep_expired(std::size_t* cursor, std::size_t buckets, uint64_t now_ms) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < buckets && i <= mask_; ++i) {
        const std::size_t b = (*cursor + i) & mask_;
        std::atomic<CacheEntry*>* link = &buckets_[b];
        for (CacheEntry* e = link->load(std::memory_order_relaxed); e != nullptr;
             e = link->load(std::memory_order_relaxed)) {
            if (e->expires_ms <= now_ms) {
                unlink(*link, e);
                ++n;
            } else {
                link = &e->next;
            }
        }
    }
    *cursor = (*cursor + buckets) & mask_;
    return n;
}

void ResolveCache::reclaim(const std::function<void()>& synchronize) {
    if (retired_.empty()) return;
    if (synchronize) synchronize();
    for (CacheEntry* e : retired_) free_entry(e);
    retired_.clear();
}

void ResolveCache::for_each(const std::function<bool(const CacheEntry&)>& f) const {
    for (std::size_t b = 0; b <= mask_; ++b)
        for (const CacheEntry* e = buckets_[b].load(std::memory_order_acquire); e != nullptr;
             e = e->next.load(std::memory_order_acquire))
            if (!f(*e)) return;
}

}  // namespace fedgate
