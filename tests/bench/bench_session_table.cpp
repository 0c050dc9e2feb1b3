// Session table speed: lookups that hit (in random order, so large tables miss the cache as they
// would under real traffic) and the insert+erase churn of short flows.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/session_table.hpp"

namespace {

using fedgate::FlowKey;
using fedgate::Session;
using fedgate::SessionTable;

// A distinct flow per id; byte order does not matter here, only that keys differ as real ones do.
FlowKey key(uint32_t id) {
    FlowKey k;
    k.src = 0xC6120000u + (id >> 16);
    k.dst = 0xC6130001u;
    k.sport = static_cast<uint16_t>(id);
    k.dport = 443;
    k.proto = 6;
    return k;
}

FlowKey reply(uint32_t id) {
    const FlowKey f = key(id);
    FlowKey r;
    r.src = f.dst;
    r.dst = f.src;
    r.sport = f.dport;
    r.dport = f.sport;
    r.proto = f.proto;
    return r;
}

// Full table of `n` sessions; looks both directions' keys up in a shuffled order.
void BM_FindHit(benchmark::State& state) {
    const auto n = static_cast<uint32_t>(state.range(0));
    SessionTable t(n);
    std::vector<FlowKey> probes;
    probes.reserve(2 * n);
    for (uint32_t id = 0; id < n; ++id) {
        t.insert(key(id), reply(id));
        probes.push_back(key(id));
        probes.push_back(reply(id));
    }
    std::shuffle(probes.begin(), probes.end(), std::mt19937(1));
    size_t i = 0;
    for (auto _ : state) {
        const SessionTable::Hit hit = t.find(probes[i]);
        benchmark::DoNotOptimize(hit.session);
        if (++i == probes.size()) i = 0;
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FindHit)->Arg(1 << 10)->Arg(1 << 16)->Arg(1 << 20);

// A table kept half full: each iteration erases the oldest session and inserts a new flow.
void BM_InsertEraseChurn(benchmark::State& state) {
    const auto n = static_cast<uint32_t>(state.range(0));
    SessionTable t(n);
    std::vector<Session*> ring(n / 2);
    uint32_t next_id = 0;
    for (Session*& s : ring) {
        s = t.insert(key(next_id), reply(next_id));
        ++next_id;
    }
    size_t oldest = 0;
    for (auto _ : state) {
        t.erase(ring[oldest]);
        ring[oldest] = t.insert(key(next_id), reply(next_id));
        benchmark::DoNotOptimize(ring[oldest]);
        ++next_id;
        if (++oldest == ring.size()) oldest = 0;
    }
    state.SetItemsProcessed(2 * state.iterations());  // one insert and one erase each
}
BENCHMARK(BM_InsertEraseChurn)->Arg(1 << 16)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
