// The port-map proxy's per-packet cost on one core, without the EAL: Nat::handle on 64-byte TCP SYNs
// (the frames tests/bench/nat_bench.sh feeds the daemon), each copied from its template into a
// scratch buffer first, as net_pcap's infinite_rx copies into a fresh mbuf. Packets are parsed
// once, outside timing; the daemon's parse, MAC checks and TX are not in these figures.
//
//  BM_TranslateEstablished/N  a SYN of one of N flows that already have sessions (the steady state
//                             of the pcap benchmark), flows in the pcap's order
//  BM_NewSession/CAP          every packet a new flow's SYN, in a table of CAP sessions; when the
//                             port pool is empty every session is expired (outside timing) and the
//                             same flows are new again
//
// A session takes a port of the external address's pool (ports 1024-65535, 64512), shared by
// sessions toward different destinations (endpoint-dependent allocation). As in nat_bench.sh the
// flows are spread over M = ceil(2 N / 64512) import mappings, each its own destination, so 1M
// flows (M = 33) all hold a session.
#include <benchmark/benchmark.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/nat.hpp"
#include "dataplane/packet.hpp"
#include "dataplane/portmap.hpp"
#include "tests/support/packet_builder.hpp"

namespace {

using fedgate::ImportRule;
using fedgate::L4Proto;
using fedgate::Nat;
using fedgate::NatConfig;
using fedgate::NatPort;
using fedgate::ParsedPacket;
using fedgate::PortMapView;
using fedgate::test::PacketBuilder;

constexpr uint16_t kPortLo = 1024, kPortHi = 65535;  // the widest pool: 64512 session ports
constexpr uint32_t kPoolPorts = kPortHi - kPortLo + 1;
constexpr uint16_t kMappedPort = 8080, kPeerPort = 9000;
constexpr uint64_t kNowMs = 1000;
constexpr std::size_t kFrame = 64;  // template stride; frames are 60 bytes

uint32_t be_ip(const char* s) { return htonl(fedgate::test::ip(s)); }

// Internal 198.18.1.0/24 on port 0, external 198.19.0.0/24 on port 1, both on-link.
int route(const void*, uint32_t dst, uint32_t* next_hop) {
    const uint32_t h = ntohl(dst);
    *next_hop = dst;
    if ((h & 0xffffff00u) == 0xc6120100u) return 0;
    if ((h & 0xffffff00u) == 0xc6130000u) return 1;
    return -1;
}

uint32_t mappings_for(uint32_t flows) { return std::max<uint32_t>(1, (2 * flows + kPoolPorts - 1) / kPoolPorts); }

// A gateway as nat_bench.sh configures it: internal 198.18.1.1, external 198.19.0.1, M imports of
// TCP 8080+j to peer beta 198.19.0.2:(9000+j).
struct Gateway {
    PortMapView maps;
    std::vector<ImportRule> rules;
    std::unique_ptr<Nat> nat;

    Gateway(uint32_t max_sessions, uint32_t mappings) : rules(mappings) {
        for (uint32_t j = 0; j < mappings; ++j) {
            rules[j].peer_addr = be_ip("198.19.0.2");
            rules[j].peer_port = htons(static_cast<uint16_t>(kPeerPort + j));
            rules[j].peer_id = 2;
            maps.publish(L4Proto::tcp, htons(static_cast<uint16_t>(kMappedPort + j)), &rules[j]);
        }
        NatConfig cfg;
        cfg.max_sessions = max_sessions;
        cfg.port_lo = kPortLo;
        cfg.port_hi = kPortHi;
        std::vector<NatPort> ports{NatPort{false, be_ip("198.18.1.1")}, NatPort{true, be_ip("198.19.0.1")}};
        nat = std::make_unique<Nat>(cfg, std::move(ports), &maps, route, nullptr);
    }
};

// The SYNs of flows 0..n-1, numbered as fedgate_bench_pcap --tcp-flows numbers them: node
// 198.18.1.(2 + i % 253), source port 1024 + i / 253, to port 8080 + i % mappings.
struct Flows {
    std::vector<uint8_t> frames;  // kFrame bytes each
    std::vector<ParsedPacket> parsed;

    Flows(uint32_t n, uint32_t mappings) : frames(std::size_t{n} * kFrame), parsed(n) {
        for (uint32_t i = 0; i < n; ++i) {
            const std::string node = "198.18.1." + std::to_string(2 + i % 253);
            const fedgate::test::Mac src{0x02, 0, 0, 1, 0, static_cast<uint8_t>(2 + i % 253)};
            std::vector<uint8_t> f = PacketBuilder()
                                         .eth(fedgate::test::kBroadcast, src)
                                         .ipv4(node, "198.18.1.1", 64, static_cast<uint16_t>(i))
                                         .tcp(static_cast<uint16_t>(1024 + i / 253), static_cast<uint16_t>(kMappedPort + i % mappings), 0x02,
                                              1000 + i)
                                         .build();
            f.resize(60, 0);
            std::memcpy(&frames[std::size_t{i} * kFrame], f.data(), f.size());
            if (fedgate::parse_packet(f.data(), static_cast<uint32_t>(f.size()), parsed[i]) != fedgate::DropReason::none)
                throw std::logic_error("bench_nat: a template does not parse");
        }
    }
    uint32_t size() const { return static_cast<uint32_t>(parsed.size()); }
};

// One packet through the NAT, as the data plane hands it over: a fresh copy of flow i's frame.
inline Nat::Verdict send(Nat& nat, const Flows& flows, uint32_t i, uint8_t* scratch) {
    std::memcpy(scratch, &flows.frames[std::size_t{i} * kFrame], kFrame);
    const ParsedPacket& p = flows.parsed[i];
    return nat.handle(scratch + p.l3_offset, p, 0, kNowMs);
}

void BM_TranslateEstablished(benchmark::State& state) {
    const auto n = static_cast<uint32_t>(state.range(0));
    Gateway gw(n, mappings_for(n));
    const Flows flows(n, mappings_for(n));
    alignas(64) uint8_t scratch[kFrame];
    for (uint32_t i = 0; i < n; ++i)  // the pcap's first pass: every flow opens its session
        if (send(*gw.nat, flows, i, scratch).kind != Nat::Verdict::Kind::forward) {
            state.SkipWithError("a flow did not open a session");
            return;
        }
    if (gw.nat->session_count() != n) {
        state.SkipWithError("session count differs from the flow count");
        return;
    }
    uint32_t i = 0;
    uint64_t forwarded = 0;
    for (auto _ : state) {
        const Nat::Verdict v = send(*gw.nat, flows, i, scratch);
        forwarded += v.kind == Nat::Verdict::Kind::forward;
        benchmark::DoNotOptimize(scratch);
        if (++i == n) i = 0;
    }
    if (forwarded != static_cast<uint64_t>(state.iterations())) state.SkipWithError("a packet of an established flow was not forwarded");
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
    state.counters["sessions"] = gw.nat->session_count();
    state.counters["mappings"] = mappings_for(n);
}
BENCHMARK(BM_TranslateEstablished)->Arg(1 << 10)->Arg(1 << 16)->Arg(kPoolPorts)->Arg(1 << 20);

void BM_NewSession(benchmark::State& state) {
    const auto cap = static_cast<uint32_t>(state.range(0));
    const uint32_t batch = cap;  // flows that fit before the table fills
    Gateway gw(cap, mappings_for(cap));
    const Flows flows(batch, mappings_for(cap));
    alignas(64) uint8_t scratch[kFrame];
    const uint64_t created0 = gw.nat->counters().sessions_created.get();
    uint32_t i = 0;
    uint64_t resets = 0;
    for (auto _ : state) {
        const Nat::Verdict v = send(*gw.nat, flows, i, scratch);
        benchmark::DoNotOptimize(v);
        if (++i == batch) {
            state.PauseTiming();
            // Every session idle "forever": the sweep removes them all and the ports go back.
            gw.nat->expire(UINT64_C(1) << 50, gw.nat->sessions().capacity());
            if (gw.nat->session_count() != 0) state.SkipWithError("the reset left sessions behind");
            ++resets;
            i = 0;
            state.ResumeTiming();
        }
    }
    const uint64_t created = gw.nat->counters().sessions_created.get() - created0;
    if (created != static_cast<uint64_t>(state.iterations())) state.SkipWithError("not every packet opened a session");
    state.SetItemsProcessed(static_cast<int64_t>(created));
    state.counters["sessions_per_s"] = benchmark::Counter(static_cast<double>(created), benchmark::Counter::kIsRate);
    state.counters["resets"] = static_cast<double>(resets);
}
// Table capacity as the daemon would size it for the pcap benchmark's 64K and 1M runs.
BENCHMARK(BM_NewSession)->Arg(1 << 16)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
