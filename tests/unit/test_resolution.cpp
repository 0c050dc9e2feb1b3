// The resolution service's pure parts, without the EAL: the RCU cache, the lcore resolver (with a
// fake ResolverIo), the broadcast rate limits, the process directory and the announce stream.
#include <gtest/gtest.h>
#include <rte_ip.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "controlplane/announce_stream.hpp"
#include "controlplane/directory.hpp"
#include "dataplane/rate_limiter.hpp"
#include "dataplane/resolve_cache.hpp"
#include "proto/resolve_wire.hpp"
#include "dataplane/resolver.hpp"

namespace fedgate {
namespace {

// ---------------------------------------------------------------------------------------------
// One record builder for every test. Fields are derived from (pid, epoch), so a reader can tell a
// whole record under the right key from a torn, freed or misplaced one.

uint32_t qpn_of(ProcessId pid) { return static_cast<uint32_t>((pid.value * 0x9e3779b97f4a7c15ull) >> 40) & kMaxQpn; }
uint32_t ipv4_of(ProcessId pid, uint32_t epoch) {
    return static_cast<uint32_t>(pid.value ^ (pid.value >> 32)) ^ (epoch * 0x01000193u);
}

DmaAddress make_record(ProcessId pid, uint32_t epoch = 1) {
    DmaAddress a;
    a.pid = pid;
    a.epoch = epoch;
    a.transport = Transport::roce_v2;
    a.gid.fill(static_cast<uint8_t>(epoch));
    a.qpn = qpn_of(pid);
    a.mtu = 4096;
    a.ipv4 = ipv4_of(pid, epoch);
    a.port = 4791;
    a.ttl_s = 60;
    return a;
}

// Is `e` a whole record made by make_record() for `key` (or a clean negative entry)?
bool entry_is_whole(const CacheEntry& e, ProcessId key) {
    if (e.key != key) return false;
    if (e.kind == CacheKind::negative) return e.record == DmaAddress{};
    const DmaAddress& r = e.record;
    if (r.pid != key || r.qpn != qpn_of(key) || r.ipv4 != ipv4_of(key, r.epoch) || r.mtu != 4096 || r.port != 4791)
        return false;
    return std::all_of(r.gid.begin(), r.gid.end(), [&](uint8_t b) { return b == static_cast<uint8_t>(r.epoch); });
}

constexpr ProcessId kA = ProcessId::make(2, 1, 10);
constexpr ProcessId kB = ProcessId::make(2, 1, 11);
constexpr ProcessId kC = ProcessId::make(3, 4, 12);

// ---------------------------------------------------------------------------------------------
// Cache.

TEST(Cache, InsertedRecordIsFoundUnderItsKey) {
    ResolveCache cache(64);
    const DmaAddress a = make_record(kA, 7);
    EXPECT_EQ(cache.upsert(kA, a, CacheKind::announced, 2, UINT64_MAX), ResolveCache::Upsert::inserted);
    const CacheEntry* e = cache.find(kA, 0);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->key.value, kA.value);
    EXPECT_EQ(e->record, a);
    EXPECT_EQ(e->kind, CacheKind::announced);
    EXPECT_EQ(e->owner_party, 2);
    EXPECT_EQ(e->expires_ms, UINT64_MAX);
    EXPECT_EQ(cache.find(kB, 0), nullptr);
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(cache.size(CacheKind::announced), 1u);
    EXPECT_EQ(cache.size(CacheKind::local), 0u);
    EXPECT_EQ(cache.retired(), 0u);
    EXPECT_EQ(cache.capacity(), 64u);
}

TEST(Cache, NewEpochReplacesOldRecord) {
    ResolveCache cache(64);
    ASSERT_EQ(cache.upsert(kA, make_record(kA, 1), CacheKind::announced, 2, UINT64_MAX),
              ResolveCache::Upsert::inserted);
    EXPECT_EQ(cache.upsert(kA, make_record(kA, 2), CacheKind::announced, 2, UINT64_MAX),
              ResolveCache::Upsert::replaced);
    const CacheEntry* e = cache.find(kA, 0);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->record, make_record(kA, 2));
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(cache.size(CacheKind::announced), 1u);
    EXPECT_EQ(cache.retired(), 1u);  // the epoch-1 entry waits for a grace period
}

TEST(Cache, ReclaimSynchronisesOncePerNonEmptyBatchAndFreesTheRetired) {
    ResolveCache cache(64);
    int syncs = 0;
    const auto sync = [&] { ++syncs; };
    cache.reclaim(sync);
    EXPECT_EQ(syncs, 0);  // nothing retired: no grace period to wait for

    cache.upsert(kA, make_record(kA, 1), CacheKind::local, 1, UINT64_MAX);
    cache.upsert(kA, make_record(kA, 2), CacheKind::local, 1, UINT64_MAX);
    cache.upsert(kB, make_record(kB, 1), CacheKind::local, 1, UINT64_MAX);
    EXPECT_TRUE(cache.remove(kB));
    EXPECT_EQ(cache.retired(), 2u);
    cache.reclaim(sync);
    EXPECT_EQ(syncs, 1);
    EXPECT_EQ(cache.retired(), 0u);
    cache.reclaim(sync);
    EXPECT_EQ(syncs, 1);

    cache.upsert(kA, make_record(kA, 3), CacheKind::local, 1, UINT64_MAX);
    cache.reclaim(sync);
    EXPECT_EQ(syncs, 2);
    ASSERT_NE(cache.find(kA, 0), nullptr);
    EXPECT_EQ(cache.find(kA, 0)->record.epoch, 3u);
}

TEST(Cache, AnEntryIsHandedOutAgainOnlyAfterReclaimAndThenComesBackClean) {
    ResolveCache cache(64);
    const auto sync = [] {};
    ASSERT_EQ(cache.upsert(kA, make_record(kA, 1), CacheKind::local, 1, UINT64_MAX), ResolveCache::Upsert::inserted);
    const CacheEntry* first = cache.find(kA, 0);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);  // a hit's fields start a cache line
    cache.upsert(kA, make_record(kA, 2), CacheKind::local, 1, UINT64_MAX);  // `first` retired
    cache.upsert(kB, make_record(kB, 1), CacheKind::announced, 2, UINT64_MAX);
    EXPECT_NE(cache.find(kA, 0), first);
    EXPECT_NE(cache.find(kB, 0), first);  // readers may still hold it: not handed out before reclaim()
    cache.reclaim(sync);

    cache.upsert(kC, make_record(kC, 5), CacheKind::answered, 3, 1000);
    const CacheEntry* again = cache.find(kC, 0);
    ASSERT_EQ(again, first);  // the freed entry, handed out again
    ResolveCache fresh(64);
    fresh.upsert(kC, make_record(kC, 5), CacheKind::answered, 3, 1000);
    const CacheEntry* want = fresh.find(kC, 0);
    ASSERT_NE(want, nullptr);
    EXPECT_TRUE(entry_is_whole(*again, kC));
    EXPECT_EQ(again->wire_sum, want->wire_sum);  // summed afresh, not onto the old record's sum
    // The record's sum as a reply's checksum adds it: DPDK's, in memory order and folded.
    EXPECT_EQ(want->wire_sum, rte_raw_cksum(&want->wire, sizeof want->wire));
    EXPECT_EQ(std::memcmp(&again->wire, &want->wire, sizeof want->wire), 0);
    EXPECT_EQ(again->kind, CacheKind::answered);
    EXPECT_EQ(again->owner_party, 3);
    EXPECT_EQ(again->expires_ms, 1000u);
}

TEST(Cache, ALargeCacheHoldsEveryRecordAcrossItsChunks) {
    // More entries than one 2 MB chunk holds (about 11K), half of them replaced, so that retired
    // entries are freed and handed out again among fresh ones.
    constexpr uint32_t kN = 30000;
    ResolveCache cache(kN);
    for (uint32_t i = 0; i < kN; ++i) {
        const ProcessId id = ProcessId::make(2, 1, i + 1);
        ASSERT_EQ(cache.upsert(id, make_record(id, 1), CacheKind::announced, 2, UINT64_MAX), ResolveCache::Upsert::inserted);
    }
    for (uint32_t i = 0; i < kN; i += 2) {
        const ProcessId id = ProcessId::make(2, 1, i + 1);
        ASSERT_EQ(cache.upsert(id, make_record(id, 2), CacheKind::announced, 2, UINT64_MAX), ResolveCache::Upsert::replaced);
        if (i % 1000 == 0) cache.reclaim([] {});
    }
    EXPECT_EQ(cache.size(), kN);
    for (uint32_t i = 0; i < kN; ++i) {
        const ProcessId id = ProcessId::make(2, 1, i + 1);
        const CacheEntry* e = cache.find(id, 0);
        ASSERT_NE(e, nullptr) << i;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(e) % 64, 0u);
        EXPECT_TRUE(entry_is_whole(*e, id)) << i;
        EXPECT_EQ(e->record.epoch, i % 2 == 0 ? 2u : 1u) << i;
    }
}

TEST(Cache, ReplacingMovesTheEntryBetweenKindCounts) {
    ResolveCache cache(64);
    cache.upsert(kA, make_record(kA), CacheKind::answered, 2, 5000);
    cache.upsert(kB, DmaAddress{}, CacheKind::negative, 0, 5000);
    EXPECT_EQ(cache.size(CacheKind::answered), 1u);
    EXPECT_EQ(cache.size(CacheKind::negative), 1u);
    EXPECT_EQ(cache.upsert(kA, make_record(kA, 2), CacheKind::announced, 2, UINT64_MAX),
              ResolveCache::Upsert::replaced);
    EXPECT_EQ(cache.upsert(kB, make_record(kB), CacheKind::answered, 2, 9000), ResolveCache::Upsert::replaced);
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(cache.size(CacheKind::local), 0u);
    EXPECT_EQ(cache.size(CacheKind::announced), 1u);
    EXPECT_EQ(cache.size(CacheKind::answered), 1u);
    EXPECT_EQ(cache.size(CacheKind::negative), 0u);
}

TEST(Cache, EntryIsAbsentFromItsExpiryOn) {
    ResolveCache cache(64);
    cache.upsert(kA, make_record(kA), CacheKind::answered, 2, 1000);
    ASSERT_NE(cache.find(kA, 0), nullptr);
    ASSERT_NE(cache.find(kA, 999), nullptr);
    EXPECT_EQ(cache.find(kA, 1000), nullptr);
    EXPECT_EQ(cache.find(kA, 123456), nullptr);
    // Expired is not removed: it still holds its place until the sweep.
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(cache.size(CacheKind::answered), 1u);
}

TEST(Cache, NegativeEntryIsFoundAsNegativeUntilItExpires) {
    ResolveCache cache(64);
    EXPECT_EQ(cache.upsert(kC, DmaAddress{}, CacheKind::negative, 0, 500), ResolveCache::Upsert::inserted);
    const CacheEntry* e = cache.find(kC, 499);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->kind, CacheKind::negative);
    EXPECT_EQ(e->record, DmaAddress{});
    EXPECT_EQ(e->owner_party, 0);
    EXPECT_EQ(cache.find(kC, 500), nullptr);
    EXPECT_EQ(cache.size(CacheKind::negative), 1u);
}

TEST(Cache, RemoveUnlinksAndRetiresOnlyThatKey) {
    ResolveCache cache(64);
    cache.upsert(kA, make_record(kA), CacheKind::announced, 2, UINT64_MAX);
    cache.upsert(kB, make_record(kB), CacheKind::announced, 2, UINT64_MAX);
    EXPECT_TRUE(cache.remove(kA));
    EXPECT_EQ(cache.find(kA, 0), nullptr);
    ASSERT_NE(cache.find(kB, 0), nullptr);
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(cache.size(CacheKind::announced), 1u);
    EXPECT_EQ(cache.retired(), 1u);
    EXPECT_FALSE(cache.remove(kA));
    EXPECT_FALSE(cache.remove(kC));
    EXPECT_EQ(cache.retired(), 1u);
}

TEST(Cache, RemoveIfRemovesEveryMatchAndCountsThem) {
    ResolveCache cache(512);
    for (uint32_t i = 0; i < 300; ++i) {
        const ProcessId id = ProcessId::make(static_cast<uint16_t>(2 + i % 3), 1, i);
        cache.upsert(id, make_record(id), i % 2 == 0 ? CacheKind::announced : CacheKind::answered,
                     static_cast<uint16_t>(2 + i % 3), UINT64_MAX);
    }
    // Announced entries from party 3: i even and i % 3 == 1, i.e. i % 6 == 4: 50 of them.
    const std::size_t n =
        cache.remove_if([](const CacheEntry& e) { return e.kind == CacheKind::announced && e.owner_party == 3; });
    EXPECT_EQ(n, 50u);
    EXPECT_EQ(cache.size(), 250u);
    EXPECT_EQ(cache.size(CacheKind::announced), 100u);
    EXPECT_EQ(cache.size(CacheKind::answered), 150u);
    EXPECT_EQ(cache.retired(), 50u);
    for (uint32_t i = 0; i < 300; ++i) {
        const ProcessId id = ProcessId::make(static_cast<uint16_t>(2 + i % 3), 1, i);
        EXPECT_EQ(cache.find(id, 0) == nullptr, i % 6 == 4) << i;
    }
    EXPECT_EQ(cache.remove_if([](const CacheEntry&) { return false; }), 0u);
    EXPECT_EQ(cache.remove_if([](const CacheEntry&) { return true; }), 250u);
    EXPECT_EQ(cache.size(), 0u);
    for (int k = 0; k < kCacheKinds; ++k) EXPECT_EQ(cache.size(static_cast<CacheKind>(k)), 0u);
}

TEST(Cache, FullCacheRefusesNewKeysAndChangesNothing) {
    ResolveCache cache(4);
    for (uint32_t i = 0; i < 4; ++i) {
        const ProcessId id = ProcessId::make(2, 1, i);
        ASSERT_EQ(cache.upsert(id, make_record(id), CacheKind::announced, 2, UINT64_MAX),
                  ResolveCache::Upsert::inserted);
    }
    const ProcessId extra = ProcessId::make(2, 1, 99);
    EXPECT_EQ(cache.upsert(extra, make_record(extra), CacheKind::local, 1, UINT64_MAX), ResolveCache::Upsert::full);
    EXPECT_EQ(cache.find(extra, 0), nullptr);
    EXPECT_EQ(cache.size(), 4u);
    EXPECT_EQ(cache.size(CacheKind::local), 0u);
    EXPECT_EQ(cache.retired(), 0u);
    // A key already held can still be replaced when full.
    const ProcessId held = ProcessId::make(2, 1, 2);
    EXPECT_EQ(cache.upsert(held, make_record(held, 5), CacheKind::announced, 2, UINT64_MAX),
              ResolveCache::Upsert::replaced);
    EXPECT_EQ(cache.find(held, 0)->record.epoch, 5u);
    EXPECT_EQ(cache.size(), 4u);
    // And a freed place takes a new key.
    EXPECT_TRUE(cache.remove(held));
    EXPECT_EQ(cache.upsert(extra, make_record(extra), CacheKind::local, 1, UINT64_MAX), ResolveCache::Upsert::inserted);
}

TEST(Cache, SizeCountsEachKindSeparately) {
    ResolveCache cache(64);
    const CacheKind kinds[] = {CacheKind::local, CacheKind::announced, CacheKind::announced, CacheKind::answered,
                               CacheKind::answered, CacheKind::answered, CacheKind::negative};
    uint32_t i = 0;
    for (const CacheKind k : kinds) {
        const ProcessId id = ProcessId::make(2, 9, i++);
        cache.upsert(id, k == CacheKind::negative ? DmaAddress{} : make_record(id), k, 2, UINT64_MAX);
    }
    EXPECT_EQ(cache.size(), 7u);
    EXPECT_EQ(cache.size(CacheKind::local), 1u);
    EXPECT_EQ(cache.size(CacheKind::announced), 2u);
    EXPECT_EQ(cache.size(CacheKind::answered), 3u);
    EXPECT_EQ(cache.size(CacheKind::negative), 1u);
    std::size_t walked = 0;
    cache.for_each([&](const CacheEntry&) { return ++walked < 3; });
    EXPECT_EQ(walked, 3u);  // for_each stops when told to
    walked = 0;
    cache.for_each([&](const CacheEntry& e) {
        EXPECT_TRUE(entry_is_whole(e, e.key));
        ++walked;
        return true;
    });
    EXPECT_EQ(walked, 7u);
}

// A reader thread calls find() in a loop while the writer churns thousands of keys and reclaims
// after a grace period: the reader must only ever see whole records under the key it asked for, and
// never an epoch older than one it already saw (a replaced record never comes back). The grace
// period is QSBR in miniature: the writer bumps `grace` and waits until the reader, between two
// lookups (a quiescent point), has copied a value at least that new into `reader_at`.
TEST(Cache, ConcurrentReaderNeverSeesTornOrStaleRecords) {
    constexpr uint32_t kKeys = 4096;
    constexpr int kOps = 60000;
    ResolveCache cache(kKeys);
    const auto key_of = [](uint32_t i) { return ProcessId::make(2, static_cast<uint16_t>(i % 7), i); };

    std::atomic<uint64_t> grace{0};
    std::atomic<uint64_t> reader_at{0};
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> reader_hits{0}, reader_lookups{0}, reader_bad{0}, reader_went_back{0};

    std::thread reader([&] {
        std::vector<uint32_t> seen(kKeys, 0);
        std::mt19937 rng(7);
        uint64_t hits = 0, lookups = 0, bad = 0, back = 0;
        while (!stop.load(std::memory_order_acquire)) {
            for (int k = 0; k < 16; ++k) {
                const uint32_t i = rng() % kKeys;
                const CacheEntry* e = cache.find(key_of(i), 0);
                ++lookups;
                if (e == nullptr) continue;
                ++hits;
                if (!entry_is_whole(*e, key_of(i))) ++bad;
                if (e->kind != CacheKind::negative) {
                    if (e->record.epoch < seen[i]) ++back;
                    seen[i] = e->record.epoch;
                }
            }
            // Quiescent: no entry pointer is held past here.
            reader_at.store(grace.load(std::memory_order_acquire), std::memory_order_release);
        }
        reader_hits = hits;
        reader_lookups = lookups;
        reader_bad = bad;
        reader_went_back = back;
    });

    int syncs = 0;
    const auto synchronize = [&] {
        ++syncs;
        const uint64_t want = grace.fetch_add(1, std::memory_order_acq_rel) + 1;
        while (reader_at.load(std::memory_order_acquire) < want) std::this_thread::yield();
    };

    std::vector<uint32_t> epoch(kKeys, 0);          // last epoch written per key (never reused)
    std::unordered_map<uint64_t, uint32_t> model;   // key -> epoch held (0: negative)
    std::mt19937 rng(11);
    for (int op = 0; op < kOps; ++op) {
        const uint32_t i = rng() % kKeys;
        const ProcessId id = key_of(i);
        const uint32_t what = rng() % 10;
        if (what < 6) {
            const CacheKind kind = what < 3 ? CacheKind::announced : CacheKind::answered;
            // EXPECT, not ASSERT: returning early would leave the reader thread unjoined.
            EXPECT_NE(cache.upsert(id, make_record(id, ++epoch[i]), kind, 2, UINT64_MAX), ResolveCache::Upsert::full);
            model[id.value] = epoch[i];
        } else if (what < 7) {
            cache.upsert(id, DmaAddress{}, CacheKind::negative, 0, UINT64_MAX);
            model[id.value] = 0;
        } else {
            EXPECT_EQ(cache.remove(id), model.erase(id.value) == 1);
        }
        if (op % 128 == 127) cache.reclaim(synchronize);
    }
    cache.reclaim(synchronize);
    stop.store(true, std::memory_order_release);
    reader.join();

    EXPECT_EQ(reader_bad.load(), 0u);
    EXPECT_EQ(reader_went_back.load(), 0u);
    EXPECT_GT(reader_hits.load(), 0u);
    EXPECT_GT(syncs, 0);
    EXPECT_EQ(cache.retired(), 0u);
    EXPECT_EQ(cache.size(), model.size());
    for (uint32_t i = 0; i < kKeys; ++i) {
        const auto it = model.find(key_of(i).value);
        const CacheEntry* e = cache.find(key_of(i), 0);
        if (it == model.end()) {
            EXPECT_EQ(e, nullptr) << i;
            continue;
        }
        ASSERT_NE(e, nullptr) << i;
        EXPECT_TRUE(entry_is_whole(*e, key_of(i))) << i;
        EXPECT_EQ(e->kind == CacheKind::negative ? 0u : e->record.epoch, it->second) << i;
    }
    RecordProperty("reader_lookups", static_cast<int>(std::min<uint64_t>(reader_lookups.load(), INT32_MAX)));
}

// 20k random operations against std::unordered_map, in a small cache (long bucket chains, often
// full) and a larger one.
void run_cache_model(uint32_t capacity, uint32_t key_space, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << "capacity " << capacity << " keys " << key_space << " seed " << seed);
    struct Held {
        DmaAddress record;
        CacheKind kind;
        uint16_t owner;
        uint64_t expires;
    };
    ResolveCache cache(capacity);
    std::unordered_map<uint64_t, Held> model;
    std::mt19937 rng(seed);
    uint64_t now = 1000;
    std::size_t expected_retired = 0;
    int syncs = 0, expected_syncs = 0;
    const auto key = [&] {
        const auto party = static_cast<uint16_t>(rng() % 3);
        return ProcessId::make(party, 7, rng() % key_space);
    };
    for (int op = 0; op < 20000; ++op) {
        const uint32_t what = rng() % 100;
        if (what < 45) {
            const ProcessId id = key();
            const auto kind = static_cast<CacheKind>(rng() % kCacheKinds);
            const uint16_t owner = static_cast<uint16_t>(rng() % 5);
            const uint64_t expires = rng() % 4 == 0 ? UINT64_MAX : now + rng() % 200;
            const DmaAddress rec = kind == CacheKind::negative ? DmaAddress{} : make_record(id, rng());
            const bool held = model.contains(id.value);
            const auto want = held ? ResolveCache::Upsert::replaced
                              : model.size() >= capacity ? ResolveCache::Upsert::full
                                                         : ResolveCache::Upsert::inserted;
            ASSERT_EQ(cache.upsert(id, rec, kind, owner, expires), want) << op;
            if (want != ResolveCache::Upsert::full) model[id.value] = {rec, kind, owner, expires};
            if (held) ++expected_retired;
        } else if (what < 60) {
            const ProcessId id = key();
            const bool held = model.erase(id.value) == 1;
            ASSERT_EQ(cache.remove(id), held) << op;
            if (held) ++expected_retired;
        } else if (what < 62) {
            const auto kind = static_cast<CacheKind>(rng() % kCacheKinds);
            const uint16_t owner = static_cast<uint16_t>(rng() % 5);
            const auto pred = [&](CacheKind k, uint16_t o) { return k == kind && o == owner; };
            std::size_t n = std::erase_if(model, [&](const auto& kv) { return pred(kv.second.kind, kv.second.owner); });
            ASSERT_EQ(cache.remove_if([&](const CacheEntry& e) { return pred(e.kind, e.owner_party); }), n) << op;
            expected_retired += n;
        } else if (what < 64) {
            // The sweep: everything expired by now.
            const std::size_t n = std::erase_if(model, [&](const auto& kv) { return kv.second.expires <= now; });
            ASSERT_EQ(cache.remove_if([&](const CacheEntry& e) { return e.expires_ms <= now; }), n) << op;
            expected_retired += n;
        } else if (what < 67) {
            ASSERT_EQ(cache.retired(), expected_retired) << op;
            if (expected_retired != 0) ++expected_syncs;
            cache.reclaim([&] { ++syncs; });
            expected_retired = 0;
            ASSERT_EQ(syncs, expected_syncs);
        } else if (what < 70) {
            now += rng() % 50;
        } else {
            const ProcessId id = key();
            const CacheEntry* e = cache.find(id, now);
            // The burst loop's way to the same entry: the bucket, its first entry, the walk from there.
            ASSERT_EQ(ResolveCache::find_from(ResolveCache::prefetch_entry(cache.prefetch_bucket(id)), id, now), e) << op;
            const auto it = model.find(id.value);
            const bool live = it != model.end() && it->second.expires > now;
            ASSERT_EQ(e != nullptr, live) << op;
            if (live) {
                ASSERT_EQ(e->key.value, id.value);
                ASSERT_EQ(e->record, it->second.record);
                ASSERT_EQ(e->kind, it->second.kind);
                ASSERT_EQ(e->owner_party, it->second.owner);
                ASSERT_EQ(e->expires_ms, it->second.expires);
            }
        }
        ASSERT_EQ(cache.size(), model.size()) << op;
        if (op % 256 == 0) {
            std::size_t by_kind[kCacheKinds] = {};
            for (const auto& [k, h] : model) ++by_kind[static_cast<int>(h.kind)];
            for (int k = 0; k < kCacheKinds; ++k)
                ASSERT_EQ(cache.size(static_cast<CacheKind>(k)), by_kind[k]) << op << " kind " << k;
            std::size_t walked = 0;
            cache.for_each([&](const CacheEntry& e) {
                ++walked;
                const auto it = model.find(e.key.value);
                EXPECT_TRUE(it != model.end() && it->second.record == e.record);
                return true;
            });
            ASSERT_EQ(walked, model.size()) << op;
        }
    }
}

TEST(Cache, MatchesAMapOverRandomOperations) {
    run_cache_model(16, 24, 1);
    run_cache_model(16, 24, 2);
    run_cache_model(1000, 1500, 3);
}

// ---------------------------------------------------------------------------------------------
// Resolver.

struct Reply {
    Requester requester;
    ProcessId target;
    ResolveStatus status;
    AnswerSource source;
    std::optional<DmaAddress> record;
};
struct Query {
    int peer;
    uint64_t query_id;
    ProcessId target;
    QueryMode mode;
};
struct Learned {
    ProcessId key;
    std::optional<DmaAddress> record;
    uint16_t owner;
};

class FakeIo : public ResolverIo {
public:
    void reply(const Requester& r, ProcessId target, ResolveStatus status, AnswerSource source,
               const DmaAddress* record) override {
        replies.push_back({r, target, status, source, record ? std::optional(*record) : std::nullopt});
    }
    void query(int peer, uint64_t query_id, ProcessId target, QueryMode mode) override {
        queries.push_back({peer, query_id, target, mode});
    }
    void learned(ProcessId key, const DmaAddress* record, uint16_t owner_party) override {
        learnt.push_back({key, record ? std::optional(*record) : std::nullopt, owner_party});
    }
    void clear() {
        replies.clear();
        queries.clear();
        learnt.clear();
    }

    std::vector<Reply> replies;
    std::vector<Query> queries;
    std::vector<Learned> learnt;
};

// This gateway is party 1; its peers are parties 2, 3 and 4 (peer indexes 0, 1 and 2).
ResolverConfig test_config() {
    ResolverConfig c;
    c.party_id = 1;
    c.peer_parties = {2, 3, 4};
    c.query_timeout_ms = 1000;
    return c;
}

struct Rig {
    explicit Rig(const ResolverConfig& cfg = test_config()) : res(cfg, cache, io) {}
    ResolveCache cache{256};
    FakeIo io;
    Resolver res;
};

Requester asker(uint32_t ip, uint64_t request_id = 1) {
    Requester r;
    r.ip = ip;
    r.port = 0x1234;
    r.in_port = 1;
    r.request_id = request_id;
    return r;
}

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002, kIpC = 0x0a000003;
constexpr uint64_t kT0 = 10000;

void expect_reply(const Reply& r, uint64_t request_id, ProcessId target, ResolveStatus status, AnswerSource source,
                  const std::optional<DmaAddress>& record = std::nullopt) {
    EXPECT_EQ(r.requester.request_id, request_id);
    EXPECT_EQ(r.target.value, target.value);
    EXPECT_EQ(r.status, status) << resolve_status_name(r.status);
    EXPECT_EQ(r.source, source) << answer_source_name(r.source);
    EXPECT_EQ(r.record, record);
}

TEST(Resolver, LocalHitRepliesOkWithSourceLocal) {
    Rig rig;
    const ProcessId id = ProcessId::make(1, 2, 3);
    rig.cache.upsert(id, make_record(id), CacheKind::local, 1, UINT64_MAX);
    rig.res.request(asker(kIpA, 42), id, kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 42, id, ResolveStatus::ok, AnswerSource::local, make_record(id));
    EXPECT_EQ(rig.io.replies[0].requester.ip, kIpA);
    EXPECT_EQ(rig.io.replies[0].requester.port, 0x1234);
    EXPECT_TRUE(rig.io.queries.empty());
    EXPECT_EQ(rig.res.counters().requests.get(), 1u);
    EXPECT_EQ(rig.res.counters().hits.get(), 1u);
    EXPECT_EQ(rig.res.counters().misses.get(), 0u);
}

// request_hit() from the entry the burst's second pass read (the cache locator's prefetch_bucket,
// then prefetch_entry): a record's entry and source as cache_answer() gives them; nothing for what
// the general path takes (a negative entry, an expired one, a miss, target 0). A party-0 ID finds
// our own party's record.
TEST(Resolver, RequestHitFromThePrefetchedEntryGivesRecordsOnly) {
    Rig rig;
    const ProcessId local = ProcessId::make(1, 2, 3);
    rig.cache.upsert(local, make_record(local), CacheKind::local, 1, UINT64_MAX);
    rig.cache.upsert(kA, make_record(kA), CacheKind::announced, 2, UINT64_MAX);
    rig.cache.upsert(kC, make_record(kC), CacheKind::answered, 3, kT0 + 1);
    rig.cache.upsert(kB, DmaAddress{}, CacheKind::negative, 2, UINT64_MAX);
    const auto hit = [&](ProcessId target, uint64_t now) {
        return rig.res.request_hit(target, Resolver::prefetch_entry(rig.res.cache_locator().prefetch_bucket(target)), now);
    };
    for (const ProcessId id : {local, ProcessId::make(0, 2, 3)}) {
        const Resolver::CacheAnswer a = hit(id, kT0);
        ASSERT_NE(a.entry, nullptr) << id.value;
        EXPECT_EQ(a.entry, rig.cache.find(local, kT0));
        EXPECT_EQ(a.source, AnswerSource::local);
    }
    for (const ProcessId id : {kA, kC}) {
        const Resolver::CacheAnswer a = hit(id, kT0);
        ASSERT_NE(a.entry, nullptr) << id.value;
        EXPECT_EQ(a.entry->key.value, id.value);
        EXPECT_EQ(a.source, AnswerSource::cache);
    }
    EXPECT_EQ(hit(kC, kT0 + 1).entry, nullptr);  // expired
    EXPECT_EQ(hit(kB, kT0).entry, nullptr);      // "not found", cached: the general path's
    EXPECT_EQ(hit(ProcessId::make(2, 1, 99), kT0).entry, nullptr);
    EXPECT_EQ(hit(ProcessId{0}, kT0).entry, nullptr);
    EXPECT_EQ(rig.res.counters().requests.get(), 0u);  // counts nothing
}

TEST(Resolver, AnnouncedAndAnsweredHitsReplyOkWithSourceCache) {
    Rig rig;
    rig.cache.upsert(kA, make_record(kA), CacheKind::announced, 2, UINT64_MAX);
    rig.cache.upsert(kC, make_record(kC), CacheKind::answered, 3, kT0 + 1);
    rig.res.request(asker(kIpA, 1), kA, kT0);
    rig.res.request(asker(kIpA, 2), kC, kT0);
    ASSERT_EQ(rig.io.replies.size(), 2u);
    expect_reply(rig.io.replies[0], 1, kA, ResolveStatus::ok, AnswerSource::cache, make_record(kA));
    expect_reply(rig.io.replies[1], 2, kC, ResolveStatus::ok, AnswerSource::cache, make_record(kC));
    EXPECT_TRUE(rig.io.queries.empty());
    EXPECT_EQ(rig.res.counters().hits.get(), 2u);
}

TEST(Resolver, ExpiredCacheEntryIsAMiss) {
    Rig rig;
    rig.cache.upsert(kC, make_record(kC), CacheKind::answered, 3, kT0);
    rig.res.request(asker(kIpA), kC, kT0);
    EXPECT_TRUE(rig.io.replies.empty());
    ASSERT_EQ(rig.io.queries.size(), 1u);
    EXPECT_EQ(rig.res.counters().misses.get(), 1u);
}

TEST(Resolver, NegativeHitRepliesNotFoundFromNegativeCache) {
    Rig rig;
    const ProcessId id = ProcessId::make(0, 5, 5);
    rig.cache.upsert(id, DmaAddress{}, CacheKind::negative, 0, kT0 + 100);
    rig.res.request(asker(kIpA, 9), id, kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 9, id, ResolveStatus::not_found, AnswerSource::negative_cache);
    EXPECT_TRUE(rig.io.queries.empty());
    EXPECT_EQ(rig.res.counters().negative_hits.get(), 1u);
    EXPECT_EQ(rig.res.counters().hits.get(), 0u);
}

TEST(Resolver, OwnPartyMissIsNotFoundWithoutAQuery) {
    Rig rig;
    const ProcessId id = ProcessId::make(1, 2, 3);
    rig.res.request(asker(kIpA, 5), id, kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 5, id, ResolveStatus::not_found, AnswerSource::local);
    EXPECT_TRUE(rig.io.queries.empty());
    EXPECT_EQ(rig.res.pending(), 0u);
    EXPECT_EQ(rig.res.counters().misses.get(), 1u);
    EXPECT_EQ(rig.res.counters().not_found.get(), 1u);
}

TEST(Resolver, PartyWithoutPeeringIsNotFoundWithoutAQuery) {
    Rig rig;
    const ProcessId id = ProcessId::make(9, 2, 3);
    rig.res.request(asker(kIpA, 5), id, kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 5, id, ResolveStatus::not_found, AnswerSource::directed);
    EXPECT_TRUE(rig.io.queries.empty());
    EXPECT_EQ(rig.res.pending(), 0u);
    EXPECT_EQ(rig.res.peer_index(9), -1);
    EXPECT_EQ(rig.res.peer_index(1), -1);
}

TEST(Resolver, TargetZeroIsBadRequest) {
    Rig rig;
    rig.res.request(asker(kIpA, 3), ProcessId{0}, kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    EXPECT_EQ(rig.io.replies[0].status, ResolveStatus::bad_request);
    EXPECT_EQ(rig.io.replies[0].record, std::nullopt);
    EXPECT_TRUE(rig.io.queries.empty());
    EXPECT_EQ(rig.res.counters().bad_requests.get(), 1u);
}

TEST(Resolver, MissGoesAsADirectedQueryToTheOwnersPeerIndex) {
    Rig rig;
    EXPECT_EQ(rig.res.peer_index(2), 0);
    EXPECT_EQ(rig.res.peer_index(3), 1);
    EXPECT_EQ(rig.res.peer_index(4), 2);
    const ProcessId id = ProcessId::make(3, 7, 70);
    rig.res.request(asker(kIpA), id, kT0);
    EXPECT_TRUE(rig.io.replies.empty());
    ASSERT_EQ(rig.io.queries.size(), 1u);
    EXPECT_EQ(rig.io.queries[0].peer, 1);
    EXPECT_EQ(rig.io.queries[0].target.value, id.value);
    EXPECT_EQ(rig.io.queries[0].mode, QueryMode::directed);
    EXPECT_NE(rig.io.queries[0].query_id, 0u);
    EXPECT_EQ(rig.res.pending(), 1u);
    EXPECT_EQ(rig.res.counters().directed.get(), 1u);
    EXPECT_EQ(rig.res.counters().broadcast.get(), 0u);
}

TEST(Resolver, DuplicateRequestsFoldIntoOneQueryAndAllWaitersGetTheAnswer) {
    Rig rig;
    const ProcessId id = ProcessId::make(2, 7, 70);
    for (uint64_t r = 1; r <= 3; ++r) rig.res.request(asker(kIpA + static_cast<uint32_t>(r), r), id, kT0 + r);
    ASSERT_EQ(rig.io.queries.size(), 1u);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_EQ(rig.res.counters().folded.get(), 2u);
    EXPECT_EQ(rig.res.pending(), 1u);

    const DmaAddress rec = make_record(id, 4);
    rig.res.answer(0, rig.io.queries[0].query_id, id, &rec, kT0 + 10);
    ASSERT_EQ(rig.io.replies.size(), 3u);
    for (uint64_t r = 1; r <= 3; ++r) {
        expect_reply(rig.io.replies[r - 1], r, id, ResolveStatus::ok, AnswerSource::directed, rec);
        EXPECT_EQ(rig.io.replies[r - 1].requester.ip, kIpA + r);
    }
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].key.value, id.value);
    EXPECT_EQ(rig.io.learnt[0].record, rec);
    EXPECT_EQ(rig.io.learnt[0].owner, 2);
    EXPECT_EQ(rig.res.pending(), 0u);
    EXPECT_EQ(rig.res.counters().answered.get(), 1u);

    // Done: a second identical answer is unmatched and a new request starts a new query.
    rig.res.answer(0, rig.io.queries[0].query_id, id, &rec, kT0 + 11);
    EXPECT_EQ(rig.io.replies.size(), 3u);
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 1u);
    rig.res.request(asker(kIpA, 9), id, kT0 + 12);
    ASSERT_EQ(rig.io.queries.size(), 2u);
    EXPECT_NE(rig.io.queries[1].query_id, rig.io.queries[0].query_id);
}

TEST(Resolver, WaitersBeyondMaxAreRefusedBusy) {
    Rig rig;
    const ProcessId id = ProcessId::make(2, 7, 70);
    for (int r = 0; r < kMaxWaiters; ++r) rig.res.request(asker(kIpA, static_cast<uint64_t>(r)), id, kT0);
    EXPECT_TRUE(rig.io.replies.empty());
    rig.res.request(asker(kIpA, 100), id, kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 100, id, ResolveStatus::busy, AnswerSource::cache);
    EXPECT_EQ(rig.res.counters().refused_busy.get(), 1u);
    EXPECT_EQ(rig.res.counters().folded.get(), static_cast<uint64_t>(kMaxWaiters - 1));
    ASSERT_EQ(rig.io.queries.size(), 1u);

    rig.io.replies.clear();
    const DmaAddress rec = make_record(id);
    rig.res.answer(0, rig.io.queries[0].query_id, id, &rec, kT0 + 1);
    ASSERT_EQ(rig.io.replies.size(), static_cast<std::size_t>(kMaxWaiters));
    for (int r = 0; r < kMaxWaiters; ++r)
        EXPECT_EQ(rig.io.replies[static_cast<std::size_t>(r)].requester.request_id, static_cast<uint64_t>(r));
}

TEST(Resolver, AnswerThatDoesNotMatchTheQueryIsUnmatchedAndRepliesNothing) {
    Rig rig;
    const ProcessId id = ProcessId::make(2, 7, 70);
    rig.res.request(asker(kIpA), id, kT0);
    ASSERT_EQ(rig.io.queries.size(), 1u);
    const uint64_t qid = rig.io.queries[0].query_id;
    const DmaAddress rec = make_record(id);
    const ProcessId other = ProcessId::make(2, 7, 71);
    const DmaAddress other_rec = make_record(other);

    rig.res.answer(0, qid + 1, id, &rec, kT0 + 1);                      // another slot's ID
    rig.res.answer(0, qid ^ (uint64_t{1} << 20), id, &rec, kT0 + 1);    // same slot, another generation
    rig.res.answer(0, qid, other, &other_rec, kT0 + 1);                 // wrong target
    rig.res.answer(1, qid, id, &rec, kT0 + 1);                          // a peer we did not ask
    rig.res.answer(3, qid, id, &rec, kT0 + 1);                          // not a peer at all
    rig.res.answer(-1, qid, id, &rec, kT0 + 1);
    rig.res.answer(0, qid, id, &other_rec, kT0 + 1);                    // a record about someone else
    rig.res.answer(1, qid, id, nullptr, kT0 + 1);                       // "not here" from one not asked
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 8u);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_TRUE(rig.io.learnt.empty());
    EXPECT_EQ(rig.io.queries.size(), 1u);
    EXPECT_EQ(rig.res.pending(), 1u);

    rig.res.answer(0, qid, id, &rec, kT0 + 2);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    EXPECT_EQ(rig.io.replies[0].status, ResolveStatus::ok);
}

TEST(Resolver, DirectedNotHereBroadcastsToAllPeers) {
    Rig rig;
    const ProcessId id = ProcessId::make(2, 7, 70);
    rig.res.request(asker(kIpA, 1), id, kT0);
    const uint64_t qid = rig.io.queries[0].query_id;
    rig.res.answer(0, qid, id, nullptr, kT0 + 5);
    EXPECT_TRUE(rig.io.replies.empty());
    ASSERT_EQ(rig.io.queries.size(), 4u);
    for (int p = 0; p < 3; ++p) {
        const Query& q = rig.io.queries[static_cast<std::size_t>(p) + 1];
        EXPECT_EQ(q.peer, p);
        EXPECT_EQ(q.query_id, qid);
        // Everyone is asked for exactly the ID the requester named, not for its party-0 form.
        EXPECT_EQ(q.target.value, id.value);
        EXPECT_EQ(q.mode, QueryMode::broadcast);
    }
    EXPECT_EQ(rig.res.counters().broadcast.get(), 1u);
    EXPECT_EQ(rig.res.pending(), 1u);
    // The broadcast has its own deadline, counted from when it went out.
    rig.res.expire(kT0 + 1004);
    EXPECT_TRUE(rig.io.replies.empty());
    rig.res.expire(kT0 + 1005);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::unreachable, AnswerSource::broadcast);
}

// After the owner said "not here", a process with the same node and local ID turns up in another
// party. It is another process: the broadcast for 2.7.71 neither relays it as 2.7.71 nor caches it
// under that ID, and waits on; the owner's own answer for exactly 2.7.71 is still taken.
TEST(Resolver, DirectedNotHereThenFoundByBroadcastInAnotherParty) {
    Rig rig;
    const ProcessId id = ProcessId::make(2, 7, 71);
    rig.res.request(asker(kIpA, 1), id, kT0);
    const uint64_t qid = rig.io.queries[0].query_id;
    rig.res.answer(0, qid, id, nullptr, kT0 + 5);
    ASSERT_EQ(rig.io.queries.size(), 4u);
    const ProcessId other = ProcessId::make(3, 7, 71);  // peer index 1 is party 3
    const DmaAddress other_rec = make_record(other);
    rig.res.answer(1, qid, id, &other_rec, kT0 + 6);                 // party 3's process, for 2.7.71
    rig.res.answer(1, qid, id.with_party(0), &other_rec, kT0 + 7);   // as if asked for party 0
    rig.res.answer(1, qid, other, &other_rec, kT0 + 7);              // as if asked for 3.7.71
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 3u);
    EXPECT_EQ(rig.res.counters().answered.get(), 0u);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_TRUE(rig.io.learnt.empty());
    EXPECT_EQ(rig.res.pending(), 1u);
    // A wrong record is no "not here" either: with the others' no, the query still waits.
    rig.res.answer(0, qid, id, nullptr, kT0 + 8);
    rig.res.answer(2, qid, id, nullptr, kT0 + 8);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_EQ(rig.res.pending(), 1u);
    // The process registered at its owner meanwhile: the answer for exactly 2.7.71 is relayed.
    const DmaAddress rec = make_record(id, 2);
    rig.res.answer(0, qid, id, &rec, kT0 + 9);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::ok, AnswerSource::broadcast, rec);
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].key.value, id.value);
    EXPECT_EQ(rig.io.learnt[0].record, rec);
    EXPECT_EQ(rig.io.learnt[0].owner, 2);
    EXPECT_EQ(rig.res.counters().answered.get(), 1u);
    EXPECT_EQ(rig.res.pending(), 0u);
}

// Only another party's process answers the broadcast (and the rest say no): the requester hears
// `unreachable` at the deadline, and nothing is learned, neither the record nor a "not found".
TEST(Resolver, DirectedNotHereBroadcastAnsweredOnlyWithAnotherIdTimesOut) {
    Rig rig;
    const ProcessId id = ProcessId::make(2, 7, 71);
    rig.res.request(asker(kIpA, 1), id, kT0);
    const uint64_t qid = rig.io.queries[0].query_id;
    rig.res.answer(0, qid, id, nullptr, kT0 + 5);
    const DmaAddress other_rec = make_record(ProcessId::make(4, 7, 71));  // peer index 2 is party 4
    rig.res.answer(2, qid, id, &other_rec, kT0 + 6);
    rig.res.answer(0, qid, id, nullptr, kT0 + 6);
    rig.res.answer(1, qid, id, nullptr, kT0 + 6);
    rig.res.expire(kT0 + 1004);
    EXPECT_TRUE(rig.io.replies.empty());
    rig.res.expire(kT0 + 1005);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::unreachable, AnswerSource::broadcast);
    EXPECT_TRUE(rig.io.learnt.empty());
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 1u);
    EXPECT_EQ(rig.res.counters().timed_out.get(), 1u);
    EXPECT_EQ(rig.res.counters().answered.get(), 0u);
}

TEST(Resolver, DirectedNotHereThenAllSayNoIsNotFoundAndLearnedNegativeUnderTheId) {
    Rig rig;
    const ProcessId id = ProcessId::make(3, 7, 71);
    rig.res.request(asker(kIpA, 1), id, kT0);
    ASSERT_EQ(rig.io.queries.size(), 1u);
    EXPECT_EQ(rig.io.queries[0].peer, 1);
    const uint64_t qid = rig.io.queries[0].query_id;
    rig.res.answer(1, qid, id, nullptr, kT0 + 5);
    ASSERT_EQ(rig.io.queries.size(), 4u);
    for (int p = 0; p < 3; ++p) rig.res.answer(p, qid, id, nullptr, kT0 + 6);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::not_found, AnswerSource::broadcast);
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].key.value, id.value);
    EXPECT_EQ(rig.io.learnt[0].record, std::nullopt);
    EXPECT_EQ(rig.res.counters().not_found.get(), 1u);
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 0u);
}

// Both ends: resolvers of parties 2, 3 and 4 answer our queries through lookup_for_peer and echo the
// queried target, as the data plane does. Party 3 runs 3.7.71, party 2 (the owner of 2.7.71) runs
// nothing on node 7. A lookup of 2.7.71 ends "not found" (party 3 is asked for 2.7.71 and says no);
// a lookup of 0.7.71 finds party 3's process, named by its real ID.
TEST(Resolver, PeersAnswerTheBroadcastForTheExactIdAndPartyZeroForTheirOwn) {
    Rig rig;
    std::map<uint16_t, std::unique_ptr<Rig>> peers;
    for (const uint16_t party : {2, 3, 4}) {
        ResolverConfig c = test_config();
        c.party_id = party;
        c.peer_parties = {1};
        peers[party] = std::make_unique<Rig>(c);
    }
    const ProcessId theirs = ProcessId::make(3, 7, 71);
    peers[3]->cache.upsert(theirs, make_record(theirs), CacheKind::local, 3, UINT64_MAX);
    const auto exchange = [&](uint64_t now) {
        for (std::size_t i = 0; i < rig.io.queries.size(); ++i) {  // answers may add queries
            const Query q = rig.io.queries[i];
            const CacheEntry* e = peers[test_config().peer_parties[static_cast<std::size_t>(q.peer)]]
                                      ->res.lookup_for_peer(q.target, now);
            rig.res.answer(q.peer, q.query_id, q.target, e != nullptr ? &e->record : nullptr, now);
        }
    };

    const ProcessId id = ProcessId::make(2, 7, 71);
    rig.res.request(asker(kIpA, 1), id, kT0);
    exchange(kT0 + 1);
    ASSERT_EQ(rig.io.queries.size(), 4u);  // directed to party 2, then the broadcast
    for (const Query& q : rig.io.queries) EXPECT_EQ(q.target.value, id.value);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::not_found, AnswerSource::broadcast);
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].key.value, id.value);
    EXPECT_EQ(rig.io.learnt[0].record, std::nullopt);
    EXPECT_EQ(peers[3]->res.counters().queries_answered_found.get(), 0u);
    EXPECT_EQ(peers[3]->res.counters().queries_answered_no.get(), 1u);
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 0u);

    rig.io.clear();
    const ProcessId unknown_owner = ProcessId::make(0, 7, 71);
    rig.res.request(asker(kIpA, 2), unknown_owner, kT0 + 10);
    exchange(kT0 + 11);
    ASSERT_EQ(rig.io.queries.size(), 3u);
    for (const Query& q : rig.io.queries) EXPECT_EQ(q.target.value, unknown_owner.value);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 2, unknown_owner, ResolveStatus::ok, AnswerSource::broadcast, make_record(theirs));
    EXPECT_EQ(rig.io.replies[0].record->pid.value, theirs.value);
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].key.value, unknown_owner.value);
    EXPECT_EQ(rig.io.learnt[0].owner, 3);
    EXPECT_EQ(peers[3]->res.counters().queries_answered_found.get(), 1u);
    // Party 4's late "no" finds the query done.
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 1u);
}

TEST(Resolver, DirectedNotHereOverTheBroadcastBudgetIsRateLimited) {
    ResolverConfig cfg = test_config();
    cfg.broadcast_burst = 0;  // broadcasts off
    Rig rig(cfg);
    const ProcessId id = ProcessId::make(2, 7, 70);
    rig.res.request(asker(kIpA, 1), id, kT0);
    rig.res.answer(0, rig.io.queries[0].query_id, id, nullptr, kT0 + 5);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::rate_limited, AnswerSource::broadcast);
    EXPECT_EQ(rig.io.queries.size(), 1u);
    EXPECT_EQ(rig.res.pending(), 0u);
    EXPECT_EQ(rig.res.counters().refused_rate.get(), 1u);
}

TEST(Resolver, BroadcastWhereAllSayNoIsNotFoundAndLearnedNegative) {
    Rig rig;
    const ProcessId id = ProcessId::make(0, 7, 70);
    rig.res.request(asker(kIpA, 1), id, kT0);
    rig.res.request(asker(kIpB, 2), id, kT0);
    ASSERT_EQ(rig.io.queries.size(), 3u);
    for (int p = 0; p < 3; ++p) {
        EXPECT_EQ(rig.io.queries[static_cast<std::size_t>(p)].peer, p);
        EXPECT_EQ(rig.io.queries[static_cast<std::size_t>(p)].mode, QueryMode::broadcast);
    }
    const uint64_t qid = rig.io.queries[0].query_id;
    rig.res.answer(2, qid, id, nullptr, kT0 + 1);
    rig.res.answer(0, qid, id, nullptr, kT0 + 2);
    rig.res.answer(0, qid, id, nullptr, kT0 + 2);  // a duplicate "no" counts once
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_TRUE(rig.io.learnt.empty());
    rig.res.answer(1, qid, id, nullptr, kT0 + 3);
    ASSERT_EQ(rig.io.replies.size(), 2u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::not_found, AnswerSource::broadcast);
    expect_reply(rig.io.replies[1], 2, id, ResolveStatus::not_found, AnswerSource::broadcast);
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].key.value, id.value);
    EXPECT_EQ(rig.io.learnt[0].record, std::nullopt);
    EXPECT_EQ(rig.io.learnt[0].owner, 0);
    EXPECT_EQ(rig.res.pending(), 0u);
    EXPECT_EQ(rig.res.counters().not_found.get(), 1u);
    EXPECT_EQ(rig.res.counters().broadcast.get(), 1u);
}

// A reload swaps the peer list under a pending broadcast: the peer that stays is re-indexed, the
// removed one no longer counts, and the query finishes when every remaining peer has said no.
TEST(Resolver, SetPeersReindexesPendingQueryAndForgetsRemovedPeers) {
    Rig rig;
    const ProcessId id = ProcessId::make(0, 7, 70);
    rig.res.request(asker(kIpA, 1), id, kT0);
    ASSERT_EQ(rig.io.queries.size(), 3u);  // parties 2, 3, 4 at indexes 0, 1, 2
    const uint64_t qid = rig.io.queries[0].query_id;
    rig.res.answer(2, qid, id, nullptr, kT0 + 1);  // party 4 says no

    std::vector<uint16_t> parties{4, 3};  // party 2 removed; 4 and 3 swap places
    rig.res.set_peers(parties);
    EXPECT_EQ(parties, (std::vector<uint16_t>{2, 3, 4}));  // the old list comes back to be freed
    EXPECT_EQ(rig.res.peer_index(2), -1);
    EXPECT_EQ(rig.res.peer_index(4), 0);
    EXPECT_EQ(rig.res.peer_index(3), 1);
    // Index 2 is no peer now: its answer cannot match.
    rig.res.answer(2, qid, id, nullptr, kT0 + 2);
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 1u);
    EXPECT_TRUE(rig.io.replies.empty());
    // Party 3 (now index 1) says no; party 4's earlier no still counts; party 2 is not waited for.
    rig.res.answer(1, qid, id, nullptr, kT0 + 3);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::not_found, AnswerSource::broadcast);
    EXPECT_EQ(rig.res.pending(), 0u);
}

TEST(Resolver, SetPeersToNoneMakesBroadcastsNotFoundAtOnce) {
    Rig rig;
    std::vector<uint16_t> none;
    rig.res.set_peers(none);
    const ProcessId id = ProcessId::make(0, 7, 71);
    rig.res.request(asker(kIpA, 5), id, kT0);
    EXPECT_TRUE(rig.io.queries.empty());
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 5, id, ResolveStatus::not_found, AnswerSource::broadcast);
}

TEST(Resolver, BroadcastWithOneYesIsOkFromBroadcast) {
    Rig rig;
    const ProcessId id = ProcessId::make(0, 7, 70);
    rig.res.request(asker(kIpA, 1), id, kT0);
    const uint64_t qid = rig.io.queries[0].query_id;
    rig.res.answer(0, qid, id, nullptr, kT0 + 1);
    const DmaAddress rec = make_record(id.with_party(4), 3);
    rig.res.answer(2, qid, id, &rec, kT0 + 2);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::ok, AnswerSource::broadcast, rec);
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].key.value, id.value);  // cached under the party-0 ID that was asked
    EXPECT_EQ(rig.io.learnt[0].record, rec);
    EXPECT_EQ(rig.io.learnt[0].owner, 4);
    // The last peer's late "no" finds nothing to change.
    rig.res.answer(1, qid, id, nullptr, kT0 + 3);
    EXPECT_EQ(rig.io.replies.size(), 1u);
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 1u);
}

TEST(Resolver, PartyZeroAnswerMustNameTheAnsweringParty) {
    Rig rig;
    const ProcessId id = ProcessId::make(0, 7, 70);
    rig.res.request(asker(kIpA, 1), id, kT0);
    const uint64_t qid = rig.io.queries[0].query_id;
    const DmaAddress as_party2 = make_record(id.with_party(2));
    const DmaAddress as_party0 = make_record(id);
    const DmaAddress other_local = make_record(ProcessId::make(3, 7, 71));
    rig.res.answer(1, qid, id, &as_party2, kT0 + 1);    // party 3 vouching for a party-2 process
    rig.res.answer(1, qid, id, &as_party0, kT0 + 1);    // the party-0 ID itself
    rig.res.answer(1, qid, id, &other_local, kT0 + 1);  // another process
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 3u);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_TRUE(rig.io.learnt.empty());
    const DmaAddress as_party3 = make_record(id.with_party(3));
    rig.res.answer(1, qid, id, &as_party3, kT0 + 2);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, id, ResolveStatus::ok, AnswerSource::broadcast, as_party3);
    ASSERT_EQ(rig.io.learnt.size(), 1u);
    EXPECT_EQ(rig.io.learnt[0].owner, 3);
}

TEST(Resolver, TimeoutRepliesUnreachableAtTheDeadlineNotBefore) {
    Rig rig;
    const ProcessId directed = ProcessId::make(2, 7, 70);
    const ProcessId broadcast = ProcessId::make(0, 7, 71);
    rig.res.request(asker(kIpA, 1), directed, kT0);
    rig.res.request(asker(kIpA, 2), broadcast, kT0 + 100);
    rig.res.expire(kT0 + 999);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_EQ(rig.res.pending(), 2u);
    rig.res.expire(kT0 + 1000);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, directed, ResolveStatus::unreachable, AnswerSource::directed);
    EXPECT_EQ(rig.res.pending(), 1u);
    rig.res.expire(kT0 + 1099);
    EXPECT_EQ(rig.io.replies.size(), 1u);
    rig.res.expire(kT0 + 1100);
    ASSERT_EQ(rig.io.replies.size(), 2u);
    expect_reply(rig.io.replies[1], 2, broadcast, ResolveStatus::unreachable, AnswerSource::broadcast);
    EXPECT_EQ(rig.res.pending(), 0u);
    EXPECT_EQ(rig.res.counters().timed_out.get(), 2u);
    EXPECT_TRUE(rig.io.learnt.empty());  // a timeout teaches the cache nothing
    // An answer after the timeout is late.
    const DmaAddress rec = make_record(directed);
    rig.res.answer(0, rig.io.queries[0].query_id, directed, &rec, kT0 + 1200);
    EXPECT_EQ(rig.io.replies.size(), 2u);
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 1u);
}

TEST(Resolver, PerRequesterBroadcastLimitRefusesThenRefills) {
    ResolverConfig cfg = test_config();
    cfg.requester_broadcast_rate = 20;  // one token per 50 ms
    cfg.requester_broadcast_burst = 3;
    cfg.broadcast_burst = 1000;
    Rig rig(cfg);
    // The two requesters must not share a bucket (the resolver hashes into 1024 with the default seed).
    const RequesterLimiter probe(1024, 1, 1);
    ASSERT_NE(probe.slot_of(kIpA), probe.slot_of(kIpB));

    uint32_t local = 1;
    const auto ask = [&](uint32_t ip, uint64_t now) {
        rig.io.replies.clear();
        rig.res.request(asker(ip), ProcessId::make(0, 1, local++), now);
        return rig.io.replies.empty() ? std::optional<ResolveStatus>() : rig.io.replies.back().status;
    };
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ask(kIpA, kT0), std::nullopt) << i;  // broadcast, pending
    EXPECT_EQ(ask(kIpA, kT0), ResolveStatus::rate_limited);
    EXPECT_EQ(rig.io.replies.back().source, AnswerSource::broadcast);
    EXPECT_EQ(ask(kIpB, kT0), std::nullopt);  // another requester has its own budget
    EXPECT_EQ(ask(kIpA, kT0 + 49), ResolveStatus::rate_limited);
    EXPECT_EQ(ask(kIpA, kT0 + 50), std::nullopt);
    EXPECT_EQ(ask(kIpA, kT0 + 50), ResolveStatus::rate_limited);
    EXPECT_EQ(rig.res.counters().refused_rate.get(), 3u);
    EXPECT_EQ(rig.res.counters().broadcast.get(), 5u);
    // Directed queries are not broadcasts: the limit does not touch them.
    EXPECT_EQ(ask(kIpA, kT0 + 50), ResolveStatus::rate_limited);
    rig.io.replies.clear();
    rig.res.request(asker(kIpA), ProcessId::make(2, 1, 999), kT0 + 50);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_EQ(rig.res.counters().directed.get(), 1u);
}

TEST(Resolver, TotalBroadcastLimitRefusesThenRefills) {
    ResolverConfig cfg = test_config();
    cfg.broadcast_rate = 10;  // one token per 100 ms
    cfg.broadcast_burst = 2;
    cfg.requester_broadcast_burst = 1000;
    Rig rig(cfg);
    uint32_t local = 1;
    const auto ask = [&](uint32_t ip, uint64_t now) {
        rig.io.replies.clear();
        rig.res.request(asker(ip), ProcessId::make(0, 1, local++), now);
        return rig.io.replies.empty() ? std::optional<ResolveStatus>() : rig.io.replies.back().status;
    };
    EXPECT_EQ(ask(kIpA, kT0), std::nullopt);
    EXPECT_EQ(ask(kIpB, kT0), std::nullopt);
    EXPECT_EQ(ask(kIpC, kT0), ResolveStatus::rate_limited);
    EXPECT_EQ(ask(kIpC, kT0 + 99), ResolveStatus::rate_limited);
    EXPECT_EQ(ask(kIpC, kT0 + 100), std::nullopt);
    EXPECT_EQ(ask(kIpA, kT0 + 100), ResolveStatus::rate_limited);
    EXPECT_EQ(ask(kIpA, kT0 + 300), std::nullopt);
    EXPECT_EQ(ask(kIpA, kT0 + 300), std::nullopt);  // 200 ms refilled two tokens, the burst
    EXPECT_EQ(ask(kIpA, kT0 + 300), ResolveStatus::rate_limited);
    EXPECT_EQ(rig.res.counters().refused_rate.get(), 4u);
    EXPECT_EQ(rig.res.counters().broadcast.get(), 5u);
    EXPECT_EQ(rig.io.queries.size(), 15u);  // five broadcasts to three peers
}

TEST(Resolver, BroadcastWithoutPeersIsNotFound) {
    ResolverConfig cfg = test_config();
    cfg.peer_parties.clear();
    Rig rig(cfg);
    rig.res.request(asker(kIpA, 4), ProcessId::make(0, 1, 1), kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 4, ProcessId::make(0, 1, 1), ResolveStatus::not_found, AnswerSource::broadcast);
    EXPECT_TRUE(rig.io.queries.empty());
    EXPECT_EQ(rig.res.pending(), 0u);
}

TEST(Resolver, FullPendingTableRefusesNewTargetsBusyButStillFolds) {
    ResolverConfig cfg = test_config();
    cfg.pending_capacity = 2;
    Rig rig(cfg);
    const ProcessId a = ProcessId::make(2, 1, 1), b = ProcessId::make(3, 1, 2), c = ProcessId::make(4, 1, 3);
    rig.res.request(asker(kIpA, 1), a, kT0);
    rig.res.request(asker(kIpA, 2), b, kT0);
    rig.res.request(asker(kIpA, 3), c, kT0);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 3, c, ResolveStatus::busy, AnswerSource::cache);
    EXPECT_EQ(rig.res.counters().refused_busy.get(), 1u);
    EXPECT_EQ(rig.io.queries.size(), 2u);
    EXPECT_EQ(rig.res.pending(), 2u);
    rig.res.request(asker(kIpB, 4), a, kT0);  // folds: no new slot needed
    EXPECT_EQ(rig.io.replies.size(), 1u);
    EXPECT_EQ(rig.res.counters().folded.get(), 1u);
    // A slot freed by an answer takes the next target.
    const DmaAddress rec = make_record(a);
    rig.res.answer(0, rig.io.queries[0].query_id, a, &rec, kT0 + 1);
    EXPECT_EQ(rig.io.replies.size(), 3u);
    rig.res.request(asker(kIpA, 5), c, kT0 + 2);
    EXPECT_EQ(rig.io.replies.size(), 3u);
    ASSERT_EQ(rig.io.queries.size(), 3u);
    EXPECT_EQ(rig.io.queries[2].peer, 2);
}

TEST(Resolver, LateAnswerForAReusedSlotIsUnmatched) {
    ResolverConfig cfg = test_config();
    cfg.pending_capacity = 1;
    Rig rig(cfg);
    const ProcessId a = ProcessId::make(2, 1, 1);
    rig.res.request(asker(kIpA, 1), a, kT0);
    rig.res.expire(kT0 + 1000);
    ASSERT_EQ(rig.io.replies.size(), 1u);
    EXPECT_EQ(rig.io.replies[0].status, ResolveStatus::unreachable);
    // The same target again: the same (only) slot, a new query ID.
    rig.res.request(asker(kIpA, 2), a, kT0 + 1001);
    ASSERT_EQ(rig.io.queries.size(), 2u);
    const uint64_t old_qid = rig.io.queries[0].query_id, new_qid = rig.io.queries[1].query_id;
    EXPECT_NE(old_qid, new_qid);
    const DmaAddress rec = make_record(a);
    rig.res.answer(0, old_qid, a, &rec, kT0 + 1002);
    EXPECT_EQ(rig.io.replies.size(), 1u);
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 1u);
    rig.res.answer(0, new_qid, a, &rec, kT0 + 1003);
    ASSERT_EQ(rig.io.replies.size(), 2u);
    expect_reply(rig.io.replies[1], 2, a, ResolveStatus::ok, AnswerSource::directed, rec);
}

TEST(Resolver, LookupForPeerAnswersOnlyLocalEntries) {
    Rig rig;
    const ProcessId mine = ProcessId::make(1, 5, 5);
    const ProcessId announced = ProcessId::make(2, 5, 5);
    const ProcessId answered = ProcessId::make(3, 5, 5);
    const ProcessId negative = ProcessId::make(1, 5, 6);
    rig.cache.upsert(mine, make_record(mine), CacheKind::local, 1, UINT64_MAX);
    rig.cache.upsert(announced, make_record(announced), CacheKind::announced, 2, UINT64_MAX);
    rig.cache.upsert(answered, make_record(answered), CacheKind::answered, 3, UINT64_MAX);
    rig.cache.upsert(negative, DmaAddress{}, CacheKind::negative, 0, UINT64_MAX);

    const CacheEntry* e = rig.res.lookup_for_peer(mine, kT0);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->record, make_record(mine));
    EXPECT_EQ(rig.res.lookup_for_peer(announced, kT0), nullptr);
    EXPECT_EQ(rig.res.lookup_for_peer(answered, kT0), nullptr);
    EXPECT_EQ(rig.res.lookup_for_peer(negative, kT0), nullptr);
    EXPECT_EQ(rig.res.lookup_for_peer(ProcessId::make(1, 9, 9), kT0), nullptr);
    EXPECT_EQ(rig.res.counters().queries_answered_found.get(), 1u);
    EXPECT_EQ(rig.res.counters().queries_answered_no.get(), 4u);
    EXPECT_TRUE(rig.io.replies.empty());
    EXPECT_TRUE(rig.io.queries.empty());
}

TEST(Resolver, LookupForPeerOfPartyZeroLooksUpOwnParty) {
    Rig rig;
    const ProcessId mine = ProcessId::make(1, 5, 5);
    const ProcessId theirs = ProcessId::make(2, 6, 6);
    rig.cache.upsert(mine, make_record(mine), CacheKind::local, 1, UINT64_MAX);
    rig.cache.upsert(theirs, make_record(theirs), CacheKind::local, 2, UINT64_MAX);  // even if held as local
    const CacheEntry* e = rig.res.lookup_for_peer(ProcessId::make(0, 5, 5), kT0);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->record.pid.value, mine.value);
    EXPECT_EQ(rig.res.lookup_for_peer(ProcessId::make(0, 6, 6), kT0), nullptr);
    EXPECT_EQ(rig.res.lookup_for_peer(theirs, kT0), nullptr);  // not our party: never vouched for
}

// Peers answer a party-0 query only for their own party, so a broadcast could never find one of
// our own processes: the local directory answers it, as lookup_for_peer does for a peer.
TEST(Resolver, PartyZeroTargetOfAnOwnProcessIsAnsweredLocally) {
    Rig rig;
    const ProcessId mine = ProcessId::make(1, 5, 5);
    rig.cache.upsert(mine, make_record(mine), CacheKind::local, 1, UINT64_MAX);
    const ProcessId asked = ProcessId::make(0, 5, 5);
    rig.res.request(asker(kIpA, 1), asked, kT0);
    EXPECT_TRUE(rig.io.queries.empty());
    ASSERT_EQ(rig.io.replies.size(), 1u);
    expect_reply(rig.io.replies[0], 1, asked, ResolveStatus::ok, AnswerSource::local, make_record(mine));
    EXPECT_EQ(rig.res.counters().hits.get(), 1u);
    EXPECT_EQ(rig.res.counters().misses.get(), 0u);
}

// Disabled until the owner applies the fix in the report. "The local directory answers before any
// peer" holds only while nothing is cached under the party-0 ID itself: a negative entry from an
// earlier broadcast (the process registered since) or a peer's earlier answer still wins.
TEST(Resolver, PartyZeroTargetPrefersOwnProcessOverEntriesCachedUnderPartyZero) {
    Rig rig;
    const ProcessId mine = ProcessId::make(1, 5, 5), asked = ProcessId::make(0, 5, 5);
    const ProcessId mine2 = ProcessId::make(1, 5, 6), asked2 = ProcessId::make(0, 5, 6);
    rig.cache.upsert(asked, DmaAddress{}, CacheKind::negative, 0, kT0 + 5000);
    rig.cache.upsert(asked2, make_record(ProcessId::make(3, 5, 6)), CacheKind::answered, 3, kT0 + 5000);
    rig.cache.upsert(mine, make_record(mine), CacheKind::local, 1, UINT64_MAX);
    rig.cache.upsert(mine2, make_record(mine2), CacheKind::local, 1, UINT64_MAX);
    rig.res.request(asker(kIpA, 1), asked, kT0);
    rig.res.request(asker(kIpA, 2), asked2, kT0);
    ASSERT_EQ(rig.io.replies.size(), 2u);
    expect_reply(rig.io.replies[0], 1, asked, ResolveStatus::ok, AnswerSource::local, make_record(mine));
    expect_reply(rig.io.replies[1], 2, asked2, ResolveStatus::ok, AnswerSource::local, make_record(mine2));
}

// The pending index (open addressing, backward-shift deletion) keeps finding every pending target
// through thousands of random requests, answers and timeouts, with targets crowded into few homes.
TEST(Resolver, PendingIndexTracksEveryTargetThroughChurn) {
    ResolverConfig cfg = test_config();
    cfg.pending_capacity = 64;
    Rig rig(cfg);
    std::map<uint64_t, uint64_t> pending;  // target -> query ID
    std::mt19937 rng(5);
    uint64_t now = kT0;
    for (int op = 0; op < 20000; ++op) {
        const ProcessId target = ProcessId::make(static_cast<uint16_t>(2 + rng() % 3), 1, rng() % 200);
        const std::size_t queries = rig.io.queries.size(), replies = rig.io.replies.size();
        if (rng() % 2 == 0) {
            rig.res.request(asker(kIpA, static_cast<uint64_t>(op)), target, now);
            if (pending.contains(target.value)) {
                // Folded unless its waiters are full.
                ASSERT_EQ(rig.io.queries.size(), queries) << op;
            } else if (pending.size() == 64) {
                ASSERT_EQ(rig.io.replies.size(), replies + 1) << op;
                ASSERT_EQ(rig.io.replies.back().status, ResolveStatus::busy) << op;
            } else {
                ASSERT_EQ(rig.io.queries.size(), queries + 1) << op;
                ASSERT_EQ(rig.io.queries.back().target.value, target.value) << op;
                pending[target.value] = rig.io.queries.back().query_id;
            }
        } else if (!pending.empty()) {
            auto it = pending.begin();
            std::advance(it, static_cast<long>(rng() % pending.size()));
            const ProcessId t{it->first};
            const DmaAddress rec = make_record(t);
            rig.res.answer(rig.res.peer_index(t.party()), it->second, t, &rec, now);
            ASSERT_GT(rig.io.replies.size(), replies) << op;
            ASSERT_EQ(rig.io.replies.back().status, ResolveStatus::ok) << op;
            ASSERT_EQ(rig.io.replies.back().target.value, t.value) << op;
            pending.erase(it);
        }
        if (op % 1000 == 999) {
            now += 1000;
            rig.res.expire(now);
            pending.clear();
        }
        ASSERT_EQ(rig.res.pending(), pending.size()) << op;
    }
    EXPECT_EQ(rig.res.counters().answers_unmatched.get(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Rate limiter.

TEST(ResolverRateLimit, TokenBucketStartsFullAndRefillsExactly) {
    TokenBucket b(4, 2);  // 4 a second: one token per 250 ms
    EXPECT_EQ(b.milli_tokens(), 2000u);
    EXPECT_TRUE(b.allow(1000));
    EXPECT_TRUE(b.allow(1000));
    EXPECT_FALSE(b.allow(1000));
    EXPECT_FALSE(b.allow(1249));
    EXPECT_EQ(b.milli_tokens(), 996u);
    EXPECT_TRUE(b.allow(1250));
    EXPECT_FALSE(b.allow(1250));
    EXPECT_TRUE(b.allow(1000000));  // a long idle gap fills to the burst, no more
    EXPECT_TRUE(b.allow(1000000));
    EXPECT_FALSE(b.allow(1000000));
}

TEST(ResolverRateLimit, ZeroRateOrBurstNeverAllows) {
    TokenBucket off_rate(0, 5), off_burst(5, 0), unset;
    for (uint64_t t : {0ull, 1000ull, 100000ull}) {
        EXPECT_FALSE(off_rate.allow(t));
        EXPECT_FALSE(off_burst.allow(t));
        EXPECT_FALSE(unset.allow(t));
    }
}

TEST(ResolverRateLimit, ClockSteppingBackRefillsNothingUntilCaughtUp) {
    TokenBucket b(1000, 1);  // one token per millisecond
    EXPECT_TRUE(b.allow(5000));
    EXPECT_FALSE(b.allow(4000));
    EXPECT_FALSE(b.allow(5000));
    EXPECT_TRUE(b.allow(5001));
}

TEST(ResolverRateLimit, RequesterLimiterKeepsABucketPerRequester) {
    RequesterLimiter lim(64, 1, 2);
    EXPECT_EQ(lim.size(), 64u);
    uint32_t other = kIpB;
    while (lim.slot_of(other) == lim.slot_of(kIpA)) ++other;
    EXPECT_TRUE(lim.allow(kIpA, 10));
    EXPECT_TRUE(lim.allow(kIpA, 10));
    EXPECT_FALSE(lim.allow(kIpA, 10));
    EXPECT_TRUE(lim.allow(other, 10));
    EXPECT_TRUE(lim.allow(kIpA, 1010));
    EXPECT_THROW(RequesterLimiter(100, 1, 1), std::invalid_argument);
    EXPECT_THROW(RequesterLimiter(0, 1, 1), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Directory. This gateway is party 1; processes register from 10.1.0.x.

constexpr uint32_t kSrc = 0x0a010005, kOtherSrc = 0x0a010006;
constexpr uint32_t kTimeout = 3000;

DmaAddress local_record(uint32_t local, uint32_t epoch = 1, uint32_t source = kSrc) {
    DmaAddress r = make_record(ProcessId::make(1, 2, local), epoch);
    r.transport = Transport::tcp;
    r.ipv4 = source;
    r.port = 9000;
    return r;
}

TEST(Directory, RegisterAddsANewProcess) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    const DmaAddress r = local_record(1);
    EXPECT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::ok);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::added);
    EXPECT_EQ(ch.record, r);
    const auto p = dir.find(r.pid);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->record, r);
    EXPECT_EQ(p->source, kSrc);
    EXPECT_EQ(p->registered_ms, 100u);
    EXPECT_EQ(p->expires_ms, 100u + kTimeout);
    EXPECT_EQ(dir.size(), 1u);
    EXPECT_EQ(dir.records(), std::vector<DmaAddress>{r});
    EXPECT_EQ(dir.counters().registered, 1u);
}

TEST(Directory, SameRecordAgainRefreshesWithoutAChange) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    const DmaAddress r = local_record(1);
    ASSERT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::ok);
    ch.kind = DirectoryChange::Kind::removed;  // must be overwritten
    EXPECT_EQ(dir.register_process(r, kSrc, 1100, &ch), RegStatus::ok);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    const auto p = dir.find(r.pid);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->registered_ms, 100u);
    EXPECT_EQ(p->expires_ms, 1100u + kTimeout);
    EXPECT_EQ(dir.counters().refreshed, 1u);
    EXPECT_EQ(dir.counters().registered, 1u);
    EXPECT_EQ(dir.counters().replaced, 0u);
}

TEST(Directory, NewEpochReplacesTheRecord) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    ASSERT_EQ(dir.register_process(local_record(1, 1), kSrc, 100, &ch), RegStatus::ok);
    const DmaAddress r2 = local_record(1, 2);
    EXPECT_EQ(dir.register_process(r2, kSrc, 500, &ch), RegStatus::ok);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::replaced);
    EXPECT_EQ(ch.record, r2);
    const auto p = dir.find(r2.pid);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->record, r2);
    EXPECT_EQ(p->registered_ms, 500u);
    EXPECT_EQ(dir.size(), 1u);
    EXPECT_EQ(dir.counters().replaced, 1u);
}

TEST(Directory, RecordOfAnotherPartyIsWrongParty) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    DmaAddress r = local_record(1);
    r.pid = r.pid.with_party(2);
    EXPECT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::wrong_party);
    r.pid = r.pid.with_party(0);
    EXPECT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::wrong_party);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    EXPECT_EQ(dir.size(), 0u);
    EXPECT_EQ(dir.counters().refused_wrong_party, 2u);
}

TEST(Directory, RecordAddressOtherThanTheSenderIsAddressMismatch) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    EXPECT_EQ(dir.register_process(local_record(1, 1, kOtherSrc), kSrc, 100, &ch), RegStatus::address_mismatch);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    EXPECT_EQ(dir.size(), 0u);
    EXPECT_EQ(dir.counters().refused_address, 1u);
}

TEST(Directory, ZeroIdOrTcpWithoutPortIsBadRecord) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    DmaAddress r = local_record(0);
    r.pid = ProcessId::make(1, 0, 0);
    EXPECT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::bad_record);
    r = local_record(1);
    r.port = 0;
    EXPECT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::bad_record);
    r.transport = Transport::roce_v2;  // RoCE needs no port
    EXPECT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::ok);
    EXPECT_EQ(dir.counters().refused_bad_record, 2u);
}

TEST(Directory, AnotherSourceCannotTakeOverALiveProcessId) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    const DmaAddress mine = local_record(1, 1, kSrc);
    ASSERT_EQ(dir.register_process(mine, kSrc, 100, &ch), RegStatus::ok);
    EXPECT_EQ(dir.register_process(local_record(1, 2, kOtherSrc), kOtherSrc, 200, &ch), RegStatus::address_mismatch);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    const auto p = dir.find(mine.pid);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->record, mine);
    EXPECT_EQ(p->source, kSrc);
    EXPECT_EQ(p->expires_ms, 100u + kTimeout);  // the refused attempt did not keep it alive
    EXPECT_EQ(dir.counters().refused_address, 1u);
}

TEST(Directory, HeartbeatChecksProcessEpochAndSource) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    const DmaAddress r = local_record(1, 7);
    ASSERT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::ok);
    EXPECT_EQ(dir.heartbeat(ProcessId::make(1, 2, 99), 7, kSrc, 500), RegStatus::unknown);
    EXPECT_EQ(dir.heartbeat(r.pid, 6, kSrc, 500), RegStatus::stale_epoch);
    EXPECT_EQ(dir.heartbeat(r.pid, 7, kOtherSrc, 500), RegStatus::address_mismatch);
    EXPECT_EQ(dir.find(r.pid)->expires_ms, 100u + kTimeout);
    EXPECT_EQ(dir.heartbeat(r.pid, 7, kSrc, 2000), RegStatus::ok);
    EXPECT_EQ(dir.find(r.pid)->expires_ms, 2000u + kTimeout);
    const DirectoryCounters c = dir.counters();
    EXPECT_EQ(c.heartbeats, 1u);
    EXPECT_EQ(c.refused_unknown, 1u);
    EXPECT_EQ(c.refused_stale_epoch, 1u);
    EXPECT_EQ(c.refused_address, 1u);
}

TEST(Directory, DeregisterRemovesAndReportsTheRecord) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    const DmaAddress r = local_record(1, 7);
    ASSERT_EQ(dir.register_process(r, kSrc, 100, &ch), RegStatus::ok);
    EXPECT_EQ(dir.deregister(r.pid, 6, kSrc, &ch), RegStatus::stale_epoch);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    EXPECT_EQ(dir.deregister(r.pid, 7, kOtherSrc, &ch), RegStatus::address_mismatch);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    EXPECT_EQ(dir.size(), 1u);
    EXPECT_EQ(dir.deregister(r.pid, 7, kSrc, &ch), RegStatus::ok);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::removed);
    EXPECT_EQ(ch.record, r);
    EXPECT_EQ(dir.size(), 0u);
    EXPECT_FALSE(dir.find(r.pid));
    EXPECT_EQ(dir.deregister(r.pid, 7, kSrc, &ch), RegStatus::unknown);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    EXPECT_EQ(dir.counters().deregistered, 1u);
}

TEST(Directory, ExpireRemovesAtTheTimeoutNotBefore) {
    Directory dir(1, 8, kTimeout);
    DirectoryChange ch;
    const DmaAddress a = local_record(1), b = local_record(2);
    ASSERT_EQ(dir.register_process(a, kSrc, 0, &ch), RegStatus::ok);
    ASSERT_EQ(dir.register_process(b, kSrc, 0, &ch), RegStatus::ok);
    ASSERT_EQ(dir.heartbeat(b.pid, b.epoch, kSrc, 1000), RegStatus::ok);
    EXPECT_TRUE(dir.expire(kTimeout - 1).empty());
    EXPECT_EQ(dir.size(), 2u);
    EXPECT_EQ(dir.expire(kTimeout), std::vector<DmaAddress>{a});
    EXPECT_EQ(dir.size(), 1u);
    EXPECT_TRUE(dir.expire(1000 + kTimeout - 1).empty());
    EXPECT_EQ(dir.expire(1000 + kTimeout), std::vector<DmaAddress>{b});
    EXPECT_EQ(dir.size(), 0u);
    EXPECT_EQ(dir.counters().expired, 2u);
    EXPECT_EQ(dir.heartbeat(a.pid, a.epoch, kSrc, 5000), RegStatus::unknown);
}

// Expiry against a model: random registrations, heartbeats, deregistrations and re-registrations
// over time; each expire() must return exactly the processes whose last deadline has passed.
TEST(Directory, ExpiryMatchesAModelThroughRandomHeartbeats) {
    Directory dir(1, 4096, kTimeout);
    std::map<uint64_t, std::pair<DmaAddress, uint64_t>> model;  // pid -> record, expires
    std::mt19937 rng(11);
    uint64_t now = 0;
    DirectoryChange ch;
    for (int op = 0; op < 20000; ++op) {
        now += rng() % 50;
        const DmaAddress r = local_record(static_cast<uint32_t>(rng() % 300));
        switch (rng() % 4) {
        case 0:
        case 1:
            if (dir.register_process(r, kSrc, now, &ch) == RegStatus::ok) model[r.pid.value] = {r, now + kTimeout};
            break;
        case 2:
            if (dir.heartbeat(r.pid, r.epoch, kSrc, now) == RegStatus::ok) model[r.pid.value].second = now + kTimeout;
            break;
        case 3:
            if (dir.deregister(r.pid, r.epoch, kSrc, &ch) == RegStatus::ok) model.erase(r.pid.value);
            break;
        }
        std::vector<uint64_t> want;
        for (auto it = model.begin(); it != model.end();) {
            if (it->second.second <= now) {
                want.push_back(it->first);
                it = model.erase(it);
            } else {
                ++it;
            }
        }
        std::vector<uint64_t> got;
        for (const DmaAddress& g : dir.expire(now)) got.push_back(g.pid.value);
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, want) << "op " << op;
        ASSERT_EQ(dir.size(), model.size()) << "op " << op;
    }
}

TEST(Cache, SweepInSlicesRemovesOnlyExpiredEntriesAndGoesRound) {
    ResolveCache cache(1024);
    for (uint32_t i = 0; i < 1000; ++i) {
        const ProcessId id = ProcessId::make(2, 1, i);
        cache.upsert(id, make_record(id), i % 2 == 0 ? CacheKind::answered : CacheKind::announced, 2,
                     i % 2 == 0 ? 100 + i : UINT64_MAX);
    }
    std::size_t cursor = 0, removed = 0;
    const std::size_t slice = cache.bucket_count() / 8;
    for (int round = 0; round < 8; ++round) removed += cache.sweep_expired(&cursor, slice, 600);
    EXPECT_EQ(cursor, 0u);  // once round
    EXPECT_EQ(removed, 251u);  // answered entries 0, 2, ..., 500 (expiring at 100 + i) are due by 600
    EXPECT_EQ(cache.size(CacheKind::answered), 249u);
    EXPECT_EQ(cache.size(CacheKind::announced), 500u);
    EXPECT_EQ(cache.find(ProcessId::make(2, 1, 500), 0), nullptr);
    EXPECT_NE(cache.find(ProcessId::make(2, 1, 502), 0), nullptr);
    cache.reclaim({});
}

TEST(Directory, FullDirectoryRefusesNewProcessesButServesHeldOnes) {
    Directory dir(1, 2, kTimeout);
    DirectoryChange ch;
    ASSERT_EQ(dir.register_process(local_record(1), kSrc, 0, &ch), RegStatus::ok);
    ASSERT_EQ(dir.register_process(local_record(2), kSrc, 0, &ch), RegStatus::ok);
    EXPECT_EQ(dir.register_process(local_record(3), kSrc, 0, &ch), RegStatus::full);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::none);
    EXPECT_EQ(dir.size(), 2u);
    EXPECT_EQ(dir.counters().refused_full, 1u);
    EXPECT_EQ(dir.register_process(local_record(2), kSrc, 10, &ch), RegStatus::ok);     // refresh
    EXPECT_EQ(dir.register_process(local_record(2, 2), kSrc, 10, &ch), RegStatus::ok);  // replace
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::replaced);
    ASSERT_EQ(dir.deregister(local_record(1).pid, 1, kSrc, &ch), RegStatus::ok);
    EXPECT_EQ(dir.register_process(local_record(3), kSrc, 20, &ch), RegStatus::ok);
    EXPECT_EQ(ch.kind, DirectoryChange::Kind::added);
}

// ---------------------------------------------------------------------------------------------
// Announce stream.

struct Sent {
    MsgType type;
    std::vector<uint8_t> body;
};

StreamBody stream_header(const std::vector<uint8_t>& body) {
    StreamBody sb{};
    EXPECT_GE(body.size(), sizeof sb);
    std::memcpy(&sb, body.data(), std::min(body.size(), sizeof sb));
    return sb;
}
uint64_t seq_of(const Sent& s) { return load_be64(stream_header(s.body).seq); }

struct Ack {
    uint64_t stream, acked;
    uint8_t flags;
};

// The receiving gateway's side: the stream state plus the records it learned from it, applied the
// way the resolution service applies them (a snapshot forgets everything first).
struct ReceiverSide {
    AnnounceReceiver rx;
    std::map<uint64_t, DmaAddress> records;
    std::vector<AnnounceReceiver::Verdict> verdicts;
    int out_of_order = 0;  // an announce older than what is held, or a withdraw of something not held
    int rollbacks = 0;     // snapshots of a stream the receiver had already left
    std::vector<uint64_t> streams;

    Ack on_message(const Sent& m) {
        const StreamBody sb = stream_header(m.body);
        const uint64_t stream = load_be64(sb.stream);
        const auto v = rx.on_message(stream, load_be64(sb.seq), sb.flags);
        verdicts.push_back(v);
        switch (v) {
        case AnnounceReceiver::Verdict::apply_snapshot:
            if (std::find(streams.begin(), streams.end(), stream) != streams.end()) ++rollbacks;
            streams.push_back(stream);
            records.clear();
            [[fallthrough]];
        case AnnounceReceiver::Verdict::apply: apply(m, load_be16(sb.count)); break;
        case AnnounceReceiver::Verdict::unknown_stream: return {stream, 0, kAckReset};
        default: break;
        }
        return {rx.stream(), rx.applied(), 0};
    }

    Ack on_sync(const SyncBody& s) {
        const uint64_t stream = load_be64(s.stream);
        if (rx.on_sync(stream, load_be64(s.last_seq)) == AnnounceReceiver::Verdict::unknown_stream)
            return {stream, 0, kAckReset};
        return {stream, rx.applied(), 0};
    }

    void apply(const Sent& m, std::size_t count) {
        const std::size_t entry = m.type == MsgType::announce ? sizeof(DmaAddressWire) : sizeof(ProcessRefBody);
        ASSERT_EQ(m.body.size(), sizeof(StreamBody) + count * entry);
        const uint8_t* p = m.body.data() + sizeof(StreamBody);
        for (std::size_t i = 0; i < count; ++i, p += entry) {
            if (m.type == MsgType::announce) {
                DmaAddressWire w;
                std::memcpy(&w, p, sizeof w);
                const auto rec = decode(w);
                ASSERT_TRUE(rec);
                const auto it = records.find(rec->pid.value);
                if (it != records.end() && it->second.epoch >= rec->epoch) ++out_of_order;
                records[rec->pid.value] = *rec;
            } else {
                ASSERT_EQ(m.type, MsgType::withdraw);
                ProcessRefBody ref;
                std::memcpy(&ref, p, sizeof ref);
                const auto it = records.find(load_be64(ref.pid));
                if (it == records.end() || it->second.epoch != load_be32(ref.epoch)) {
                    ++out_of_order;
                    continue;
                }
                records.erase(it);
            }
        }
    }
};

std::vector<DmaAddress> values(const std::map<uint64_t, DmaAddress>& m) {
    std::vector<DmaAddress> v;
    for (const auto& [k, r] : m) v.push_back(r);
    return v;
}

// Delivers everything the sender sends, and every ACK back, at once and in order.
void pump(AnnounceSender& tx, ReceiverSide& rxs, uint64_t now_ms, const std::map<uint64_t, DmaAddress>& truth,
          uint64_t& next_stream) {
    for (int round = 0; round < 100000; ++round) {
        std::vector<Sent> out;
        tx.poll(now_ms, [&](MsgType t, const std::vector<uint8_t>& b) { out.push_back({t, b}); });
        if (out.empty()) return;
        for (const Sent& m : out) {
            const Ack a = rxs.on_message(m);
            if (tx.on_ack(a.stream, a.acked, a.flags, now_ms)) tx.restart(next_stream++, values(truth), now_ms);
        }
    }
    ADD_FAILURE() << "the stream did not drain";
}

// A datagram channel that drops, duplicates and reorders: each copy is late by a random delay, and
// copies due at the same millisecond arrive in the order they were sent.
template <class T>
class LossyChannel {
public:
    LossyChannel(uint32_t seed, double drop, double dup, uint32_t max_delay_ms)
        : rng_(seed), drop_(drop), dup_(dup), max_delay_(max_delay_ms) {}

    void send(const T& item, uint64_t now_ms) {
        std::uniform_real_distribution<double> u(0, 1);
        if (u(rng_) < drop_) return;
        const int copies = u(rng_) < dup_ ? 2 : 1;
        for (int c = 0; c < copies; ++c) in_flight_.emplace(std::pair(now_ms + rng_() % (max_delay_ + 1), sent_++), item);
    }
    std::vector<T> deliver(uint64_t now_ms) {
        std::vector<T> out;
        while (!in_flight_.empty() && in_flight_.begin()->first.first <= now_ms) {
            out.push_back(std::move(in_flight_.begin()->second));
            in_flight_.erase(in_flight_.begin());
        }
        return out;
    }
    bool empty() const { return in_flight_.empty(); }

private:
    std::mt19937_64 rng_;
    double drop_, dup_;
    uint32_t max_delay_;
    uint64_t sent_ = 0;
    std::multimap<std::pair<uint64_t, uint64_t>, T> in_flight_;  // (due, send order) -> item
};

struct LossyRun {
    bool converged = false;
    uint64_t restarts = 0, retransmits = 0, converged_at_ms = 0;
    int out_of_order = 0, rollbacks = 0;
};

std::map<uint64_t, DmaAddress> by_pid(const std::vector<DmaAddress>& records) {
    std::map<uint64_t, DmaAddress> m;
    for (const DmaAddress& r : records) m[r.pid.value] = r;
    return m;
}

// The sending gateway's directory changes for `ops_ms` (processes register, restart with a new
// epoch, deregister, or stop heartbeating and expire), each change going into the stream the way
// the resolution service publishes it, while both directions drop, duplicate and reorder; sync
// keepalives go out every 250 ms. Runs until the directory is still, everything is acknowledged
// and the receiver holds exactly the directory's records.
LossyRun run_lossy(uint32_t seed, double drop, double dup, uint32_t max_delay_ms, uint64_t ops_ms) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    constexpr uint32_t kHeartbeatTimeout = 1500;
    std::mt19937 rng(seed);
    Directory dir(1, 100000, kHeartbeatTimeout);
    std::vector<uint64_t> dying;  // stopped heartbeating
    uint32_t next_local = 1;
    DirectoryChange ch;
    const auto reg = [&](const DmaAddress& r, uint64_t now) {
        EXPECT_EQ(dir.register_process(r, kSrc, now, &ch), RegStatus::ok);
        return ch;
    };
    for (; next_local <= 100; ++next_local) reg(local_record(next_local), 0);

    AnnounceSender tx(8, 40, 640);
    ReceiverSide rxs;
    uint64_t next_stream = (uint64_t{seed} << 32) | 1;
    tx.restart(next_stream++, dir.records(), 0);
    const auto publish = [&](const DirectoryChange& c) {
        if (c.kind == DirectoryChange::Kind::added || c.kind == DirectoryChange::Kind::replaced) tx.announce(c.record);
        if (c.kind == DirectoryChange::Kind::removed) tx.withdraw(c.record.pid, c.record.epoch);
    };

    struct Packet {
        bool sync;
        Sent msg;
        SyncBody sync_body;
    };
    LossyChannel<Packet> fwd(seed * 2 + 1, drop, dup, max_delay_ms);
    LossyChannel<Ack> back(seed * 2 + 2, drop, dup, max_delay_ms);

    LossyRun run;
    for (uint64_t now = 0; now < ops_ms + 600000; ++now) {
        if (now < ops_ms && rng() % 20 == 0) {
            const std::vector<LocalProcess> procs = dir.list();
            const uint32_t what = rng() % 4;
            if (what == 0 || procs.size() < 10) {
                publish(reg(local_record(next_local++), now));
            } else {
                const DmaAddress& r = procs[rng() % procs.size()].record;
                if (what == 1) {
                    publish(reg(local_record(r.pid.local(), r.epoch + 1), now));  // the process restarted
                } else if (what == 2) {
                    EXPECT_EQ(dir.deregister(r.pid, r.epoch, kSrc, &ch), RegStatus::ok);
                    publish(ch);
                } else {
                    dying.push_back(r.pid.value);
                }
            }
        }
        if (now % 500 == 0) {
            for (const LocalProcess& p : dir.list()) {
                if (std::find(dying.begin(), dying.end(), p.record.pid.value) == dying.end()) {
                    EXPECT_EQ(dir.heartbeat(p.record.pid, p.record.epoch, kSrc, now), RegStatus::ok);
                }
            }
        }
        for (const DmaAddress& gone : dir.expire(now)) publish({DirectoryChange::Kind::removed, gone});

        tx.poll(now, [&](MsgType t, const std::vector<uint8_t>& b) { fwd.send({false, {t, b}, {}}, now); });
        if (now % 250 == 0) fwd.send({true, {}, tx.sync_body(static_cast<uint32_t>(dir.size()))}, now);
        for (const Packet& p : fwd.deliver(now))
            back.send(p.sync ? rxs.on_sync(p.sync_body) : rxs.on_message(p.msg), now);
        for (const Ack& a : back.deliver(now))
            if (tx.on_ack(a.stream, a.acked, a.flags, now)) tx.restart(next_stream++, dir.records(), now);
        if (now >= ops_ms + kHeartbeatTimeout && tx.unacked() == 0 && tx.queued() == 0 &&
            rxs.rx.stream() == tx.stream() && rxs.rx.applied() == tx.last_seq() && fwd.empty() && back.empty()) {
            run.converged = true;
            run.converged_at_ms = now;
            break;
        }
    }
    run.restarts = tx.stats().restarts;
    run.retransmits = tx.stats().retransmits;
    run.out_of_order = rxs.out_of_order;
    run.rollbacks = rxs.rollbacks;
    EXPECT_TRUE(run.converged);
    EXPECT_GT(dir.counters().expired, 0u);
    EXPECT_GT(dir.counters().replaced, 0u);
    EXPECT_GT(dir.counters().deregistered, 0u);
    EXPECT_EQ(rxs.records, by_pid(dir.records()));
    EXPECT_EQ(rxs.out_of_order, 0);
    EXPECT_EQ(rxs.rollbacks, 0);
    return run;
}

TEST(AnnounceStream, ConvergesOverALossyReorderingChannel) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
        const LossyRun run = run_lossy(seed, 0.15, 0.05, 30, 5000);
        RecordProperty("seed" + std::to_string(seed) + "_restarts", static_cast<int>(run.restarts));
        RecordProperty("seed" + std::to_string(seed) + "_converged_ms", static_cast<int>(run.converged_at_ms));
        RecordProperty("seed" + std::to_string(seed) + "_rollbacks", run.rollbacks);
    }
}

TEST(AnnounceStream, ConvergesOverALossyInOrderChannel) {
    // Zero delay spread: loss and duplication without reordering.
    for (uint32_t seed = 11; seed <= 13; ++seed) run_lossy(seed, 0.2, 0.1, 0, 5000);
}

TEST(AnnounceStream, WindowLimitsMessagesInFlight) {
    AnnounceSender tx(4, 100);
    std::vector<DmaAddress> snapshot;
    for (uint32_t i = 0; i < 10 * kMaxAnnouncePerMsg; ++i) snapshot.push_back(make_record(ProcessId::make(1, 1, i)));
    tx.restart(77, snapshot, 0);
    EXPECT_EQ(tx.unacked(), 10u);
    std::vector<Sent> out;
    const auto send = [&](MsgType t, const std::vector<uint8_t>& b) { out.push_back({t, b}); };
    tx.poll(0, send);
    ASSERT_EQ(out.size(), 4u);
    for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(seq_of(out[i]), i + 1);
    tx.poll(1, send);
    EXPECT_EQ(out.size(), 4u);
    EXPECT_FALSE(tx.on_ack(77, 2, 0, 2));
    EXPECT_EQ(tx.acked(), 2u);
    EXPECT_EQ(tx.unacked(), 8u);
    tx.poll(2, send);
    ASSERT_EQ(out.size(), 6u);
    EXPECT_EQ(seq_of(out[4]), 5u);
    EXPECT_EQ(seq_of(out[5]), 6u);
    EXPECT_FALSE(tx.on_ack(77, 6, 0, 3));
    tx.poll(3, send);
    ASSERT_EQ(out.size(), 10u);
    EXPECT_EQ(seq_of(out[9]), 10u);
    EXPECT_FALSE(tx.on_ack(77, 10, 0, 4));
    EXPECT_EQ(tx.unacked(), 0u);
    EXPECT_EQ(tx.stats().messages_sent, 10u);
    EXPECT_EQ(tx.stats().retransmits, 0u);
}

TEST(AnnounceStream, AckOutsideWhatWasSentOrForAnotherStreamChangesNothing) {
    AnnounceSender tx(2, 100);
    std::vector<DmaAddress> snapshot;
    for (uint32_t i = 0; i < 3 * kMaxAnnouncePerMsg; ++i) snapshot.push_back(make_record(ProcessId::make(1, 1, i)));
    tx.restart(77, snapshot, 0);
    tx.poll(0, [](MsgType, const std::vector<uint8_t>&) {});
    EXPECT_FALSE(tx.on_ack(77, 3, 0, 1));   // never sent
    EXPECT_FALSE(tx.on_ack(78, 2, 0, 1));   // another stream
    EXPECT_FALSE(tx.on_ack(78, 0, kAckReset, 1));  // a reset of a stream we left is no reset
    EXPECT_EQ(tx.acked(), 0u);
    EXPECT_FALSE(tx.on_ack(77, 1, 0, 1));
    EXPECT_FALSE(tx.on_ack(77, 1, 0, 1));  // again: nothing new
    EXPECT_EQ(tx.acked(), 1u);
    EXPECT_EQ(tx.unacked(), 2u);
    EXPECT_TRUE(tx.on_ack(77, 0, kAckReset, 2));
}

// A receiver that lost the stream's state (it restarted, then took the stream up again from a late
// copy of the snapshot) acknowledges less than it once did; go-back-N never resends what was
// acknowledged, so the sender starts over, after a few such ACKs in a row (one is reordering).
TEST(AnnounceStream, AReceiverThatKeepsAcknowledgingLessThanItHadGetsANewStream) {
    AnnounceSender tx(8, 100);
    std::vector<DmaAddress> snapshot;
    for (uint32_t i = 0; i < 5 * kMaxAnnouncePerMsg; ++i) snapshot.push_back(make_record(ProcessId::make(1, 1, i)));
    tx.restart(77, snapshot, 0);
    tx.poll(0, [](MsgType, const std::vector<uint8_t>&) {});
    EXPECT_FALSE(tx.on_ack(77, 4, 0, 1));
    EXPECT_FALSE(tx.on_ack(77, 2, 0, 2)) << "one ACK behind: reordering";
    EXPECT_FALSE(tx.on_ack(77, 4, 0, 3)) << "level again";
    EXPECT_FALSE(tx.on_ack(77, 1, 0, 4));
    EXPECT_FALSE(tx.on_ack(77, 1, 0, 5));
    EXPECT_TRUE(tx.on_ack(77, 1, 0, 6)) << "three in a row behind: the receiver went back";
    EXPECT_EQ(tx.acked(), 4u);
}

// A receiver that refuses the stream (unknown_stream + reset) while nothing is acknowledged is
// waiting for the snapshot, which is being resent; if it still refuses after twice the longest
// timeout it will never take it (it holds an older stream it took from a late snapshot): restart.
TEST(AnnounceStream, AResetBeforeAnyAckRestartsOnlyOnceTheSnapshotHadTimeToArrive) {
    AnnounceSender tx(8, 100, 400);
    tx.restart(9, {make_record(ProcessId::make(1, 1, 1))}, 1000);
    tx.poll(1000, [](MsgType, const std::vector<uint8_t>&) {});
    EXPECT_FALSE(tx.on_ack(9, 0, kAckReset, 1001));
    EXPECT_FALSE(tx.on_ack(9, 0, kAckReset, 1000 + 799));
    EXPECT_TRUE(tx.on_ack(9, 0, kAckReset, 1000 + 800));
    tx.restart(10, {}, 2000);
    EXPECT_FALSE(tx.on_ack(10, 0, kAckReset, 2001)) << "a new stream waits again";
}

TEST(AnnounceStream, RetransmitsEverythingUnackedAfterRtoDoublingUpToMax) {
    AnnounceSender tx(4, 100, 400);
    tx.restart(5, {make_record(ProcessId::make(1, 1, 1))}, 0);
    std::vector<uint64_t> sent_at;
    uint64_t now = 0;
    const auto send = [&](MsgType, const std::vector<uint8_t>& b) {
        EXPECT_EQ(load_be64(stream_header(b).seq), 1u);
        sent_at.push_back(now);
    };
    for (now = 0; now <= 1100; ++now) tx.poll(now, send);
    EXPECT_EQ(sent_at, (std::vector<uint64_t>{0, 100, 300, 700, 1100}));
    EXPECT_EQ(tx.stats().retransmits, 4u);
    EXPECT_EQ(tx.stats().messages_sent, 5u);

    // Progress resets the timeout to the base.
    EXPECT_FALSE(tx.on_ack(5, 1, 0, 1150));
    sent_at.clear();
    tx.announce(make_record(ProcessId::make(1, 1, 2)));
    tx.announce(make_record(ProcessId::make(1, 1, 3)));
    tx.withdraw(ProcessId::make(1, 1, 1), 1);
    std::vector<uint64_t> seqs;
    const auto send2 = [&](MsgType, const std::vector<uint8_t>& b) {
        seqs.push_back(load_be64(stream_header(b).seq));
        sent_at.push_back(now);
    };
    for (now = 1200; now <= 1300; ++now) tx.poll(now, send2);
    EXPECT_EQ(sent_at, (std::vector<uint64_t>{1200, 1200, 1300, 1300}));
    EXPECT_EQ(seqs, (std::vector<uint64_t>{2, 3, 2, 3}));  // go back N: both again
}

TEST(AnnounceStream, EmptySnapshotStillSendsOneMessage) {
    AnnounceSender tx(4, 100);
    tx.restart(9, {}, 0);
    EXPECT_EQ(tx.unacked(), 1u);
    EXPECT_EQ(tx.last_seq(), 1u);
    std::vector<Sent> out;
    tx.poll(0, [&](MsgType t, const std::vector<uint8_t>& b) { out.push_back({t, b}); });
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].type, MsgType::announce);
    ASSERT_EQ(out[0].body.size(), sizeof(StreamBody));
    const StreamBody sb = stream_header(out[0].body);
    EXPECT_EQ(load_be64(sb.stream), 9u);
    EXPECT_EQ(load_be64(sb.seq), 1u);
    EXPECT_EQ(load_be16(sb.count), 0u);
    EXPECT_EQ(sb.flags, kStreamSnapshot);

    // It clears what the receiver held from us.
    ReceiverSide rxs;
    rxs.records[1] = make_record(ProcessId{1});
    const Ack a = rxs.on_message(out[0]);
    EXPECT_EQ(rxs.verdicts.back(), AnnounceReceiver::Verdict::apply_snapshot);
    EXPECT_TRUE(rxs.records.empty());
    EXPECT_EQ(a.stream, 9u);
    EXPECT_EQ(a.acked, 1u);
    EXPECT_FALSE(tx.on_ack(a.stream, a.acked, a.flags, 1));
    EXPECT_EQ(tx.unacked(), 0u);
}

TEST(AnnounceStream, MessagesPackRunsOfOneKindUpToTheirLimits) {
    EXPECT_EQ(kMaxAnnouncePerMsg, 28u);
    EXPECT_EQ(kMaxWithdrawPerMsg, 115u);
    AnnounceSender tx(1000, 100);
    tx.restart(3, {make_record(ProcessId::make(1, 1, 1))}, 0);
    for (uint32_t i = 0; i < 30; ++i) tx.announce(make_record(ProcessId::make(1, 2, i)));
    for (uint32_t i = 0; i < 116; ++i) tx.withdraw(ProcessId::make(1, 3, i), 1);
    tx.announce(make_record(ProcessId::make(1, 4, 1)));
    std::vector<Sent> out;
    tx.poll(0, [&](MsgType t, const std::vector<uint8_t>& b) { out.push_back({t, b}); });
    ASSERT_EQ(out.size(), 6u);
    const std::vector<std::pair<MsgType, uint16_t>> want = {{MsgType::announce, 1},  {MsgType::announce, 28},
                                                            {MsgType::announce, 2},  {MsgType::withdraw, 115},
                                                            {MsgType::withdraw, 1},  {MsgType::announce, 1}};
    for (std::size_t i = 0; i < out.size(); ++i) {
        const StreamBody sb = stream_header(out[i].body);
        EXPECT_EQ(out[i].type, want[i].first) << i;
        EXPECT_EQ(load_be16(sb.count), want[i].second) << i;
        EXPECT_EQ(load_be64(sb.seq), i + 1) << i;
        EXPECT_EQ(sb.flags, i == 0 ? kStreamSnapshot : 0) << i;
        EXPECT_LE(out[i].body.size(), kMaxBody) << i;
    }
    EXPECT_EQ(tx.stats().records_announced, 32u);
    EXPECT_EQ(tx.stats().records_withdrawn, 116u);
}

TEST(AnnounceStream, ReceiverRestartGetsAResetAndThenTheFullSet) {
    std::map<uint64_t, DmaAddress> truth;
    for (uint32_t i = 1; i <= 50; ++i) {
        const DmaAddress r = make_record(ProcessId::make(1, 1, i));
        truth[r.pid.value] = r;
    }
    uint64_t next_stream = 100;
    AnnounceSender tx(8, 100);
    ReceiverSide rxs;
    tx.restart(next_stream++, values(truth), 0);
    pump(tx, rxs, 0, truth, next_stream);
    ASSERT_EQ(rxs.records, truth);
    EXPECT_EQ(tx.stream(), 100u);

    // The receiving gateway restarts and knows nothing; the next change reaches it.
    rxs = ReceiverSide{};
    const DmaAddress added = make_record(ProcessId::make(1, 1, 51));
    truth[added.pid.value] = added;
    tx.announce(added);
    std::vector<Sent> out;
    tx.poll(10, [&](MsgType t, const std::vector<uint8_t>& b) { out.push_back({t, b}); });
    ASSERT_EQ(out.size(), 1u);
    const Ack reset = rxs.on_message(out[0]);
    EXPECT_EQ(rxs.verdicts.back(), AnnounceReceiver::Verdict::unknown_stream);
    EXPECT_EQ(reset.stream, 100u);
    EXPECT_EQ(reset.flags, kAckReset);
    EXPECT_TRUE(rxs.records.empty());
    ASSERT_TRUE(tx.on_ack(reset.stream, reset.acked, reset.flags, 11));
    tx.restart(next_stream++, values(truth), 11);
    EXPECT_EQ(tx.stream(), 101u);
    EXPECT_EQ(tx.acked(), 0u);
    pump(tx, rxs, 12, truth, next_stream);
    EXPECT_EQ(rxs.verdicts[1], AnnounceReceiver::Verdict::apply_snapshot);
    EXPECT_EQ(rxs.records, truth);
    EXPECT_EQ(rxs.rx.stream(), 101u);
    EXPECT_EQ(rxs.rx.applied(), tx.last_seq());
    EXPECT_EQ(tx.stats().restarts, 2u);

    // A quiet restart is found by the keepalive instead.
    rxs = ReceiverSide{};
    const Ack via_sync = rxs.on_sync(tx.sync_body(static_cast<uint32_t>(truth.size())));
    EXPECT_EQ(via_sync.stream, 101u);
    EXPECT_EQ(via_sync.flags, kAckReset);
    EXPECT_TRUE(tx.on_ack(via_sync.stream, via_sync.acked, via_sync.flags, 20));
}

TEST(AnnounceStream, ReceiverVerdictsForMessagesAndSyncs) {
    using V = AnnounceReceiver::Verdict;
    AnnounceReceiver rx;
    EXPECT_EQ(rx.on_sync(5, 3), V::unknown_stream);
    EXPECT_EQ(rx.on_sync(0, 0), V::unknown_stream);
    EXPECT_EQ(rx.on_message(5, 2, 0), V::unknown_stream);
    EXPECT_EQ(rx.on_message(5, 1, 0), V::unknown_stream);  // seq 1 without the snapshot flag
    EXPECT_EQ(rx.stream(), 0u);
    EXPECT_EQ(rx.on_message(5, 1, kStreamSnapshot), V::apply_snapshot);
    EXPECT_EQ(rx.stream(), 5u);
    EXPECT_EQ(rx.applied(), 1u);
    EXPECT_EQ(rx.on_sync(5, 1), V::duplicate);  // up to date
    EXPECT_EQ(rx.on_sync(5, 3), V::gap);        // we miss its tail
    EXPECT_EQ(rx.on_message(5, 3, 0), V::gap);
    EXPECT_EQ(rx.applied(), 1u);
    EXPECT_EQ(rx.on_message(5, 2, 0), V::apply);
    EXPECT_EQ(rx.on_message(5, 3, 0), V::apply);
    EXPECT_EQ(rx.on_message(5, 2, 0), V::duplicate);
    EXPECT_EQ(rx.on_message(5, 1, kStreamSnapshot), V::duplicate);
    EXPECT_EQ(rx.applied(), 3u);
    EXPECT_EQ(rx.on_sync(5, 3), V::duplicate);
    EXPECT_EQ(rx.on_sync(6, 3), V::unknown_stream);
    EXPECT_EQ(rx.on_message(6, 1, kStreamSnapshot), V::apply_snapshot);  // the sender started over
    EXPECT_EQ(rx.stream(), 6u);
    EXPECT_EQ(rx.applied(), 1u);
    EXPECT_STREQ(receiver_verdict_name(V::apply_snapshot), "apply_snapshot");
    EXPECT_STREQ(receiver_verdict_name(V::unknown_stream), "unknown_stream");
}

// A late copy of the first message of a stream the receiver has left (the sender started over
// since) must not take the receiver back to it: that would forget the peer's current records and
// apply a stale snapshot until the next sync noticed.
TEST(AnnounceStream, LateCopyOfALeftStreamsSnapshotDoesNotRollTheReceiverBack) {
    using V = AnnounceReceiver::Verdict;
    AnnounceReceiver rx;
    ASSERT_EQ(rx.on_message(5, 1, kStreamSnapshot), V::apply_snapshot);
    ASSERT_EQ(rx.on_message(5, 2, 0), V::apply);
    ASSERT_EQ(rx.on_message(6, 1, kStreamSnapshot), V::apply_snapshot);  // the sender started over
    ASSERT_EQ(rx.on_message(7, 1, kStreamSnapshot), V::apply_snapshot);  // and again
    ASSERT_EQ(rx.on_message(7, 2, 0), V::apply);
    EXPECT_EQ(rx.on_message(5, 1, kStreamSnapshot), V::duplicate);  // late copies from streams left
    EXPECT_EQ(rx.on_message(6, 1, kStreamSnapshot), V::duplicate);
    EXPECT_EQ(rx.on_message(5, 3, 0), V::duplicate);
    EXPECT_EQ(rx.stream(), 7u);
    EXPECT_EQ(rx.applied(), 2u);
    EXPECT_EQ(rx.on_message(7, 3, 0), V::apply);
}

// No sender uses stream 0: it is a fresh receiver's "following nothing", never a stream to follow.
TEST(AnnounceStream, StreamZeroIsNeverFollowed) {
    using V = AnnounceReceiver::Verdict;
    AnnounceReceiver rx;
    EXPECT_EQ(rx.on_message(0, 1, kStreamSnapshot), V::unknown_stream);
    EXPECT_EQ(rx.on_message(0, 1, 0), V::unknown_stream);
    EXPECT_EQ(rx.applied(), 0u);
}

TEST(AnnounceStream, SyncBodyNamesStreamLastSeqAndRecordCount) {
    AnnounceSender tx(4, 100);
    std::vector<DmaAddress> snapshot;
    for (uint32_t i = 0; i < 60; ++i) snapshot.push_back(make_record(ProcessId::make(1, 1, i)));
    tx.restart(0x0102030405060708, snapshot, 0);
    const SyncBody b = tx.sync_body(60);
    EXPECT_EQ(load_be64(b.stream), 0x0102030405060708u);
    EXPECT_EQ(load_be64(b.last_seq), 3u);  // 28 + 28 + 4
    EXPECT_EQ(load_be32(b.records), 60u);
}

TEST(AnnounceStream, HundredThousandRecordSnapshotPacksIntoCeilMessages) {
    constexpr std::size_t kRecords = 100000;
    std::map<uint64_t, DmaAddress> truth;
    for (uint32_t i = 0; i < kRecords; ++i) {
        const DmaAddress r = make_record(ProcessId::make(1, static_cast<uint16_t>(i >> 16), i));
        truth[r.pid.value] = r;
    }
    AnnounceSender tx(64, 100);
    uint64_t next_stream = 1;
    tx.restart(next_stream++, values(truth), 0);
    const std::size_t want = (kRecords + kMaxAnnouncePerMsg - 1) / kMaxAnnouncePerMsg;
    EXPECT_EQ(want, 3572u);
    EXPECT_EQ(tx.unacked(), want);
    EXPECT_EQ(tx.last_seq(), want);
    EXPECT_EQ(tx.stats().records_announced, kRecords);
    ReceiverSide rxs;
    pump(tx, rxs, 0, truth, next_stream);
    EXPECT_EQ(rxs.records.size(), kRecords);
    EXPECT_TRUE(rxs.records == truth);
    EXPECT_EQ(tx.stats().messages_sent, want);
    EXPECT_EQ(tx.unacked(), 0u);
}

}  // namespace
}  // namespace fedgate
