// Writes the benchmark's input: a pcap of ICMP echo requests to the gateway's internal address from
// many node addresses, built with the tests' packet builder.
#include <cstdlib>
#include <iostream>
#include <string>

#include "tests/support/packet_builder.hpp"
#include "tests/support/pcap_file.hpp"

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
    std::vector<std::vector<uint8_t>> frames;
    for (int i = 0; i < count; ++i) {
        const fedgate::test::Mac src{0x02, 0, 0, 1, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
        const std::string node = "198.18.1." + std::to_string(2 + i % 250);
        // Broadcast destination: the vdev's MAC is not known before the run, and both the gateway
        // and testpmd's icmpecho engine accept it.
        frames.push_back(PacketBuilder()
                             .eth(fedgate::test::kBroadcast, src)
                             .ipv4(node, argv[2], 64, static_cast<uint16_t>(i))
                             .icmp(8, 0, 0x4242, static_cast<uint16_t>(i))
                             .payload(56)
                             .build());
    }
    return fedgate::test::write_pcap(argv[1], frames) ? 0 : 1;
}
