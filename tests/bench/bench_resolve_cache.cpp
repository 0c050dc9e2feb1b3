// Resolution cache speed: lookups that hit, in random order (large caches miss the CPU's caches as
// requests for many processes would), one at a time and a burst of 32 at a time with each burst's
// entries prefetched first (buckets, then entries), as the data plane's burst loop does before it
// answers any.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/resolve_cache.hpp"

namespace {

using fedgate::CacheEntry;
using fedgate::CacheKind;
using fedgate::DmaAddress;
using fedgate::ProcessId;
using fedgate::ResolveCache;

constexpr int kBurst = 32;

// A cache of `n` records of one party (as a peer's announcements fill it) and a shuffled run of
// lookups over them, a multiple of the burst long.
struct Filled {
    explicit Filled(uint32_t n) : cache(2 * n) {
        for (uint32_t i = 0; i < n; ++i) {
            DmaAddress a;
            a.pid = ProcessId::make(2, 1, i);
            a.epoch = 1;
            a.port = static_cast<uint16_t>(20000 + i % 1000);
            cache.upsert(a.pid, a, CacheKind::announced, 2, UINT64_MAX);
        }
        std::mt19937 rng(1);
        probes.resize(std::max<uint32_t>(4 * n, 1u << 16));
        for (auto& p : probes) p = ProcessId::make(2, 1, static_cast<uint32_t>(rng() % n));
    }
    ResolveCache cache;
    std::vector<ProcessId> probes;
};

// What a reply reads of a hit: the entry's wire form and its sum.
uint32_t use(const CacheEntry* e) { return e == nullptr ? 0 : e->wire_sum + e->wire.port[1]; }

void BM_FindHit(benchmark::State& state) {
    Filled f(static_cast<uint32_t>(state.range(0)));
    std::size_t i = 0;
    uint64_t sum = 0;
    for (auto _ : state) {
        sum += use(f.cache.find(f.probes[i], 0));
        if (++i == f.probes.size()) i = 0;
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FindHit)->Arg(1 << 10)->Arg(1 << 16)->Arg(1 << 20);

void BM_FindHitBurstPrefetched(benchmark::State& state) {
    Filled f(static_cast<uint32_t>(state.range(0)));
    std::size_t i = 0;
    uint64_t sum = 0;
    for (auto _ : state) {
        const ResolveCache::Bucket* bucket[kBurst];
        const CacheEntry* first[kBurst];
        for (int j = 0; j < kBurst; ++j) bucket[j] = f.cache.prefetch_bucket(f.probes[i + j]);
        for (int j = 0; j < kBurst; ++j) first[j] = ResolveCache::prefetch_entry(bucket[j]);
        for (int j = 0; j < kBurst; ++j) sum += use(ResolveCache::find_from(first[j], f.probes[i + j], 0));
        i += kBurst;
        if (i == f.probes.size()) i = 0;
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_FindHitBurstPrefetched)->Arg(1 << 10)->Arg(1 << 16)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
