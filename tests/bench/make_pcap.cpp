// Writes the benchmarks' input pcaps, built with the tests' packet builder:
//  - echo mode (tests/bench/echo_bench.sh): ICMP echo requests to the gateway's internal address
//    from many node addresses;
//  - TCP flow mode (tests/bench/nat_bench.sh): one 64-byte TCP SYN per flow (Ethernet 14 + IPv4 20
//    + TCP 20, padded to 60 bytes, 64 on the wire with the FCS) from node 198.18.1.x:sport to the
//    gateway's internal address and a mapped port (or flow i to the i % PORTS'th of PORTS
//    consecutive mapped ports, so that more flows than one address has session ports can exist:
//    each mapping is its own destination, and a session port is shared across destinations). The gateway opens a session on the first pass
//    over the file and translates every later pass's SYNs through it;
//  - resolve mode (tests/bench/resolve_bench.sh): two files, REGISTER messages that fill the
//    gateway's directory (read once) and RESOLVE requests for those records (replayed forever),
//    from 16 requester addresses, encoded with the resolution service's own wire functions.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "proto/resolve_wire.hpp"
#include "tests/support/packet_builder.hpp"
#include "tests/support/pcap_file.hpp"

using fedgate::DmaAddress;
using fedgate::Header;
using fedgate::MsgHeader;
using fedgate::MsgType;
using fedgate::ProcessId;
using fedgate::RegisterBody;
using fedgate::ResolveBody;
using fedgate::Transport;
using fedgate::kDefaultResolvePort;
using fedgate::test::PacketBuilder;

namespace {

constexpr const char* kUsage =
    "usage: fedgate_bench_pcap OUT.pcap GATEWAY_IP COUNT\n"
    "         ICMP echo requests, e.g. fedgate_bench_pcap echo.pcap 198.18.1.1 1024\n"
    "       fedgate_bench_pcap --tcp-flows OUT.pcap GATEWAY_IP PORT FLOWS [PORTS [PACKETS]]\n"
    "         one 64-byte TCP SYN per flow from 198.18.1.2..254 x source ports 1024.. to GATEWAY_IP:PORT,\n"
    "         or, with PORTS, flow i to GATEWAY_IP:(PORT + i % PORTS) (one mapping per port); with\n"
    "         PACKETS (at least FLOWS, at most 16M), that many packets, packet j of flow j % FLOWS,\n"
    "         e.g. fedgate_bench_pcap --tcp-flows nat.pcap 198.18.1.1 8080 65536\n"
    "       fedgate_bench_pcap --resolve REGISTER.pcap RESOLVE.pcap GATEWAY_IP PARTY RECORDS REQUESTS REQUESTER_NET\n"
    "         RECORDS registrations of PARTY.1.i and REQUESTS lookups of PARTY.1.(j % RECORDS), from\n"
    "         REQUESTER_NET.2..17 UDP port 40000 to GATEWAY_IP:7410,\n"
    "         e.g. fedgate_bench_pcap --resolve reg.pcap res.pcap 198.18.1.1 1 1024 4096 198.18.9\n";

constexpr uint32_t kNodes = 253;           // 198.18.1.2 .. 198.18.1.254
constexpr uint32_t kFirstSport = 1024;
constexpr uint32_t kSports = 65536 - kFirstSport;
constexpr uint32_t kMaxFlows = kNodes * kSports;
constexpr uint32_t kMaxPackets = 16u << 20;
constexpr std::size_t kMinFrame = 60;      // Ethernet minimum without the FCS

bool parse_uint(const char* s, uint64_t max, uint64_t* out) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (s[0] == '\0' || s[0] == '-' || *end != '\0' || v > max) return false;
    *out = v;
    return true;
}

int echo_mode(const char* out, const char* gateway, const char* count_arg) {
    uint64_t count = 0;
    if (!parse_uint(count_arg, 65536, &count) || count < 1) {
        std::cerr << "fedgate_bench_pcap: COUNT must be 1..65536\n";
        return 2;
    }
    std::vector<std::vector<uint8_t>> frames;
    for (uint64_t i = 0; i < count; ++i) {
        const fedgate::test::Mac src{0x02, 0, 0, 1, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
        const std::string node = "198.18.1." + std::to_string(2 + i % 250);
        // Broadcast destination: the vdev's MAC is not known before the run, and both the gateway
        // and testpmd's icmpecho engine accept it.
        frames.push_back(PacketBuilder()
                             .eth(fedgate::test::kBroadcast, src)
                             .ipv4(node, gateway, 64, static_cast<uint16_t>(i))
                             .icmp(8, 0, 0x4242, static_cast<uint16_t>(i))
                             .payload(56)
                             .build());
    }
    return fedgate::test::write_pcap(out, frames) ? 0 : 1;
}

int tcp_flow_mode(const char* out, const char* gateway, const char* port_arg, const char* flows_arg,
                  const char* ports_arg, const char* packets_arg) {
    uint64_t port = 0, flows = 0, ports = 1, packets = 0;
    if (!parse_uint(port_arg, 65535, &port) || port < 1) {
        std::cerr << "fedgate_bench_pcap: PORT must be 1..65535\n";
        return 2;
    }
    if (ports_arg != nullptr && (!parse_uint(ports_arg, 65536 - port, &ports) || ports < 1)) {
        std::cerr << "fedgate_bench_pcap: PORTS must be 1.." << 65536 - port << " (PORT + PORTS - 1 <= 65535)\n";
        return 2;
    }
    if (!parse_uint(flows_arg, kMaxFlows, &flows) || flows < 1) {
        std::cerr << "fedgate_bench_pcap: FLOWS must be 1.." << kMaxFlows << " (" << kNodes << " node addresses x "
                  << kSports << " source ports)\n";
        return 2;
    }
    packets = flows;
    if (packets_arg != nullptr && (!parse_uint(packets_arg, kMaxPackets, &packets) || packets < flows)) {
        std::cerr << "fedgate_bench_pcap: PACKETS must be " << flows << ".." << kMaxPackets << " (at least FLOWS)\n";
        return 2;
    }
    try {
        fedgate::test::ip(gateway);
    } catch (const std::exception&) {
        std::cerr << "fedgate_bench_pcap: GATEWAY_IP '" << gateway << "' is not an IPv4 address\n";
        return 2;
    }
    // Flow i: node 198.18.1.(2 + i % 253), source port 1024 + i / 253. Consecutive packets come
    // from different nodes, as they would from many busy hosts.
    // Packet j is flow j % FLOWS's (its IP ID j's low bits), so the file's packets and its flows
    // are counted apart: many stored packets over few flows, for the replay's share of the cost.
    std::vector<std::vector<uint8_t>> frames;
    frames.reserve(packets);
    std::string nodes[kNodes];
    for (uint32_t n = 0; n < kNodes; ++n) nodes[n] = "198.18.1." + std::to_string(2 + n);
    for (uint64_t j = 0; j < packets; ++j) {
        const uint64_t i = j % flows;
        const uint32_t node = static_cast<uint32_t>(i % kNodes);
        const auto sport = static_cast<uint16_t>(kFirstSport + i / kNodes);
        // Each node its own unicast MAC; broadcast destination as in echo mode (both fedgated and
        // testpmd's io engine take it).
        const fedgate::test::Mac src{0x02, 0, 0, 1, 0, static_cast<uint8_t>(2 + node)};
        std::vector<uint8_t> f = PacketBuilder()
                                     .eth(fedgate::test::kBroadcast, src)
                                     .ipv4(nodes[node], gateway, 64, static_cast<uint16_t>(j))
                                     .tcp(sport, static_cast<uint16_t>(port + i % ports), 0x02 /* SYN */, static_cast<uint32_t>(1000 + i))
                                     .build();
        f.resize(kMinFrame, 0);  // Ethernet padding after the 40-byte IPv4 packet
        frames.push_back(std::move(f));
    }
    return fedgate::test::write_pcap(out, frames) ? 0 : 1;
}

// Requester r of the 16: REQUESTER_NET.(2 + r), one unicast MAC each.
constexpr uint32_t kRequesters = 16;
constexpr uint16_t kRequesterPort = 40000;
constexpr uint32_t kRecordEpoch = 1;
constexpr uint32_t kFirstRecordPort = 5000;
constexpr uint32_t kRecordPorts = 60000;

std::vector<uint8_t> resolve_frame(const std::string& requester, uint32_t r, const char* gateway, const Header& h,
                                   const void* body, std::size_t body_len, uint16_t ip_id) {
    std::vector<uint8_t> msg(sizeof(MsgHeader) + body_len);
    MsgHeader wire;
    encode(h, wire);
    std::memcpy(msg.data(), &wire, sizeof wire);
    std::memcpy(msg.data() + sizeof wire, body, body_len);
    const fedgate::test::Mac src{0x02, 0, 0, 9, 0, static_cast<uint8_t>(2 + r)};
    // Broadcast destination as in the other modes: the vdev's MAC is not known before the run.
    return PacketBuilder()
        .eth(fedgate::test::kBroadcast, src)
        .ipv4(requester, gateway, 64, ip_id)
        .udp(kRequesterPort, kDefaultResolvePort)
        .payload(msg)
        .build();
}

int resolve_mode(char** a) {
    const char *reg_out = a[0], *res_out = a[1], *gateway = a[2], *net = a[6];
    uint64_t party = 0, records = 0, requests = 0;
    if (!parse_uint(a[3], 65535, &party) || party < 1) {
        std::cerr << "fedgate_bench_pcap: PARTY must be 1..65535\n";
        return 2;
    }
    if (!parse_uint(a[4], 4000000, &records) || records < 1) {
        std::cerr << "fedgate_bench_pcap: RECORDS must be 1..4000000\n";
        return 2;
    }
    if (!parse_uint(a[5], 4000000, &requests) || requests < 1) {
        std::cerr << "fedgate_bench_pcap: REQUESTS must be 1..4000000\n";
        return 2;
    }
    std::string requesters[kRequesters];
    try {
        fedgate::test::ip(gateway);
        for (uint32_t r = 0; r < kRequesters; ++r) {
            requesters[r] = std::string(net) + "." + std::to_string(2 + r);
            fedgate::test::ip(requesters[r]);
        }
    } catch (const std::exception&) {
        std::cerr << "fedgate_bench_pcap: GATEWAY_IP must be an IPv4 address and REQUESTER_NET three octets, "
                     "like 198.18.9\n";
        return 2;
    }

    std::vector<std::vector<uint8_t>> frames;
    frames.reserve(records);
    for (uint64_t i = 0; i < records; ++i) {
        const auto r = static_cast<uint32_t>(i % kRequesters);
        DmaAddress rec;
        rec.pid = ProcessId::make(static_cast<uint16_t>(party), 1, static_cast<uint32_t>(i));
        rec.epoch = kRecordEpoch;
        rec.transport = Transport::tcp;
        rec.ipv4 = fedgate::test::ip(requesters[r]);  // the gateway wants the sender's own address
        rec.port = static_cast<uint16_t>(kFirstRecordPort + i % kRecordPorts);
        RegisterBody body;
        encode(rec, body.record);
        // Request IDs 1.. for registrations; lookups continue after them, so none repeats.
        const Header h{MsgType::reg, 0, sizeof body, i + 1, 0};
        frames.push_back(resolve_frame(requesters[r], r, gateway, h, &body, sizeof body, static_cast<uint16_t>(i)));
    }
    if (!fedgate::test::write_pcap(reg_out, frames)) return 1;

    frames.clear();
    frames.reserve(requests);
    for (uint64_t j = 0; j < requests; ++j) {
        const auto r = static_cast<uint32_t>(j % kRequesters);
        ResolveBody body;
        fedgate::store_be64(body.target, ProcessId::make(static_cast<uint16_t>(party), 1, static_cast<uint32_t>(j % records)).value);
        const Header h{MsgType::resolve, 0, sizeof body, records + j + 1, 0};
        frames.push_back(resolve_frame(requesters[r], r, gateway, h, &body, sizeof body, static_cast<uint16_t>(j)));
    }
    return fedgate::test::write_pcap(res_out, frames) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 9 && std::strcmp(argv[1], "--resolve") == 0) return resolve_mode(argv + 2);
    if (argc >= 6 && argc <= 8 && std::strcmp(argv[1], "--tcp-flows") == 0)
        return tcp_flow_mode(argv[2], argv[3], argv[4], argv[5], argc >= 7 ? argv[6] : nullptr, argc == 8 ? argv[7] : nullptr);
    if (argc == 4 && argv[1][0] != '-') return echo_mode(argv[1], argv[2], argv[3]);
    std::cerr << kUsage;
    return 2;
}
