// Writes seed inputs for the fuzzers: packets from the test builder and the example config.
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tests/support/packet_builder.hpp"

using fedgate::test::PacketBuilder;

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: make_seeds DIR\n";
        return 2;
    }
    const fedgate::test::Mac a{2, 0, 0, 0, 0, 1}, b{2, 0, 0, 0, 0, 2};
    const std::vector<std::vector<uint8_t>> seeds = {
        PacketBuilder().eth(fedgate::test::kBroadcast, a).arp(1, a, "198.18.1.10", {}, "198.18.1.1").build(),
        PacketBuilder().eth(b, a).ipv4("198.18.1.10", "198.18.1.1").icmp(8, 0, 1, 1).payload(56).build(),
        PacketBuilder().eth(b, a).ipv4("198.18.1.10", "198.18.2.10").udp(1000, 53).payload(20).build(),
        PacketBuilder().eth(b, a).ipv4("198.18.1.10", "198.18.2.10").tcp(1000, 80).payload(20).build(),
        PacketBuilder().eth(b, a).vlan(5).vlan(6).ipv4("198.18.1.10", "198.18.1.1").fragment(true, 0).udp(1, 2).build(),
    };
    for (std::size_t i = 0; i < seeds.size(); ++i) {
        std::ofstream f(std::string(argv[1]) + "/seed" + std::to_string(i), std::ios::binary);
        f.write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
    }
    return 0;
}
