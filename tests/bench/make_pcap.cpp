// Writes the benchmark's input: a pcap of ICMP echo requests to the gateway's internal address from
// many node addresses, built with the tests' packet builder.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "tests/support/packet_builder.hpp"

using fedgate::test::PacketBuilder;

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: fedgate_bench_pcap OUT.pcap GATEWAY_IP COUNT\n"
                     "  e.g. fedgate_bench_pcap echo.pcap 198.18.1.1 1024\n";
        return 2;
    }
    const int count = std::atoi(argv[3]);
    if (count < 1 || count > 65536) {
        std::cerr << "fedgate_bench_pcap: COUNT must be 1..65536\n";
        return 2;
    }
    std::ofstream f(argv[1], std::ios::binary);
    const uint32_t hdr[] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};
    f.write(reinterpret_cast<const char*>(hdr), sizeof hdr);
    for (int i = 0; i < count; ++i) {
        const fedgate::test::Mac src{0x02, 0, 0, 1, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
        const std::string node = "198.18.1." + std::to_string(2 + i % 250);
        // Broadcast destination: the vdev's MAC is not known before the run, and both the gateway
        // and testpmd's icmpecho engine accept it.
        const auto pkt = PacketBuilder()
                             .eth(fedgate::test::kBroadcast, src)
                             .ipv4(node, argv[2], 64, static_cast<uint16_t>(i))
                             .icmp(8, 0, 0x4242, static_cast<uint16_t>(i))
                             .payload(56)
                             .build();
        const uint32_t rec[] = {0, 0, static_cast<uint32_t>(pkt.size()), static_cast<uint32_t>(pkt.size())};
        f.write(reinterpret_cast<const char*>(rec), sizeof rec);
        f.write(reinterpret_cast<const char*>(pkt.data()), static_cast<std::streamsize>(pkt.size()));
    }
    return f ? 0 : 1;
}
