// The RoCE v2 rewrite's per-packet cost on one core, without the EAL: roce_rewrite (addresses,
// DestQP, TTL, checksums, incremental ICRC) on packets of 64, 1024 and 4096 payload bytes, beside
// the full ICRC computation that a gateway re-blessing packets would need. The rewrite must cost
// the same at every size; the full computation grows with the payload.
//
//  BM_Rewrite/P          the steady state: every packet the same length (the entry's memo holds)
//  BM_RewriteNewLength/P every packet a length the memo has not seen (the GF(2) multiplication)
//  BM_FullIcrc/P         icrc_compute over the whole packet, for comparison
#include <benchmark/benchmark.h>

#include <arpa/inet.h>

#include <vector>

#include "dataplane/roce.hpp"
#include "tests/support/packet_builder.hpp"

namespace {

using namespace fedgate;

std::vector<uint8_t> packet(std::size_t payload) {
    return test::PacketBuilder()
        .eth({2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2})
        .ipv4("198.18.1.10", "198.18.1.1")
        .udp(49152, kRoceV2Port)
        .udp_no_checksum()
        .bth(0x01, 0x4000, 1)
        .payload(payload)
        .icrc()
        .build();
}

void prepare(RoceEntry& e) {
    e.new_src = htonl(test::ip("198.19.0.1"));
    e.new_dst = htonl(test::ip("198.19.0.2"));
    e.new_dqpn = 0x777;
    roce_prepare(e, htonl(test::ip("198.18.1.10")), htonl(test::ip("198.18.1.1")), 0x4000);
}

void BM_Rewrite(benchmark::State& state) {
    auto f = packet(static_cast<std::size_t>(state.range(0)));
    RoceEntry e;
    prepare(e);
    const auto ip_len = static_cast<uint32_t>(f.size() - 14);
    for (auto _ : state) {
        roce_rewrite(f.data() + 14, ip_len, e);
        benchmark::DoNotOptimize(f.data());
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_RewriteNewLength(benchmark::State& state) {
    auto f = packet(static_cast<std::size_t>(state.range(0)));
    RoceEntry e;
    prepare(e);
    const auto ip_len = static_cast<uint32_t>(f.size() - 14);
    for (auto _ : state) {
        e.memo_tail = UINT32_MAX;
        roce_rewrite(f.data() + 14, ip_len, e);
        benchmark::DoNotOptimize(f.data());
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_FullIcrc(benchmark::State& state) {
    const auto f = packet(static_cast<std::size_t>(state.range(0)));
    for (auto _ : state) benchmark::DoNotOptimize(icrc_compute(f.data() + 14, static_cast<uint32_t>(f.size() - 14)));
    state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_Rewrite)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_RewriteNewLength)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_FullIcrc)->Arg(64)->Arg(1024)->Arg(4096);

}  // namespace

BENCHMARK_MAIN();
