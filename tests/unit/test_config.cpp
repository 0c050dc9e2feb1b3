// The configuration file: what a good file parses to, the defaults, and the message for each kind of bad file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "controlplane/config.hpp"
#include "dataplane/peer_auth.hpp"

namespace {

using fedgate::ConfigError;
using fedgate::parse_config;
using fedgate::PortRoleCfg;

// One good file, kept in sections so bad files can be made by swapping a single piece.
const std::string kGateway = R"([gateway]
party = "alpha"
party_id = 1
socket = "/tmp/fedgate-test/alpha.sock"
state_dir = "/tmp/fedgate-test/alpha-state"
)";

const std::string kEal = R"([eal]
args = ["--no-huge", "--no-shconf", "-l", "0-1"]
)";

const std::string kDataplane = R"([dataplane]
idle = "spin"
idle_sleep_max_us = 150
idle_polls_before_sleep = 64
idle_yield_us = 40
mbufs = 4095
punt_ring = 2048
neighbour_capacity = 128
neighbour_reachable_s = 20
neighbour_stale_s = 600
arp_probe_interval_ms = 250
arp_probes = 5
)";

const std::string kInsidePort = R"([[port]]
name = "inside"
role = "internal"
device = "net_af_packet0,iface=veth-in"
address = "198.18.1.1/24"
)";

const std::string kOutsidePort = R"([[port]]
name = "outside"
role = "external"
device = "net_af_packet1,iface=veth-out"
address = "198.18.100.1/24"
next_hop = "198.18.100.254"
)";

const std::string kBetaPeer = R"([[peer]]
party = "beta"
party_id = 2
address = "198.18.100.2"
key = "00112233445566778899aabbccddeeff"
)";

const std::string kGammaPeer = R"([[peer]]
party = "gamma"
party_id = 3
address = "198.18.100.3"
key = "ffeeddccbbaa99887766554433221100"
)";

std::string file_of(const std::string& gateway, const std::string& eal, const std::string& dataplane,
                    const std::string& ports, const std::string& peers) {
    return "# fedgate test configuration\n" + gateway + "\n" + eal + "\n" + dataplane + "\n" + ports + "\n" + peers;
}

const std::string kGood = file_of(kGateway, kEal, kDataplane, kInsidePort + "\n" + kOutsidePort, kBetaPeer);

// `text` with its one occurrence of `from` replaced by `to`.
std::string replaced(const std::string& text, const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    if (at == std::string::npos || text.find(from, at + 1) != std::string::npos) {
        ADD_FAILURE() << "'" << from << "' must occur exactly once in the test file";
        return text;
    }
    return text.substr(0, at) + to + text.substr(at + from.size());
}

// 1-based number of the line holding the `nth` occurrence of `needle`.
int line_of(const std::string& text, const std::string& needle, int nth = 1) {
    std::size_t at = std::string::npos;
    for (int i = 0; i < nth; ++i) {
        at = text.find(needle, at == std::string::npos ? 0 : at + 1);
        if (at == std::string::npos) {
            ADD_FAILURE() << "'" << needle << "' occurs fewer than " << nth << " times in the test file";
            return -1;
        }
    }
    return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

// Checks that parsing `text` fails with "test.toml:LINE:COL: KEY: WHAT" (LINE 0: no line is checked,
// only the file name).
::testing::AssertionResult rejects(const std::string& text, const std::string& key, const std::string& what,
                                   int line) {
    try {
        parse_config(text, "test.toml");
    } catch (const ConfigError& e) {
        const std::string msg = e.what();
        const std::string tail = key.empty() ? ": " + what : ": " + key + ": " + what;
        const std::string head = line > 0 ? "test.toml:" + std::to_string(line) + ":" : "test.toml";
        if (e.file() != "test.toml") return ::testing::AssertionFailure() << "file() is '" << e.file() << "'";
        if (e.key() != key) return ::testing::AssertionFailure() << "key() is '" << e.key() << "', not '" << key << "'";
        if (msg.rfind(head, 0) != 0)
            return ::testing::AssertionFailure() << "message '" << msg << "' does not start with '" << head << "'";
        if (msg.size() < tail.size() || msg.compare(msg.size() - tail.size(), tail.size(), tail) != 0)
            return ::testing::AssertionFailure() << "message '" << msg << "' does not end with '" << tail << "'";
        return ::testing::AssertionSuccess();
    } catch (const std::exception& e) {
        return ::testing::AssertionFailure() << "threw something other than ConfigError: " << e.what();
    }
    return ::testing::AssertionFailure() << "parsed without error";
}

// ---- a good file ----

TEST(Config, GoodFileParsesEveryValue) {
    const fedgate::Config c = parse_config(kGood, "test.toml");

    EXPECT_EQ(c.source, "test.toml");
    EXPECT_EQ(c.party, "alpha");
    EXPECT_EQ(c.party_id, 1);
    EXPECT_EQ(c.socket, "/tmp/fedgate-test/alpha.sock");
    EXPECT_EQ(c.state_dir, "/tmp/fedgate-test/alpha-state");
    EXPECT_EQ(c.eal_args, (std::vector<std::string>{"--no-huge", "--no-shconf", "-l", "0-1"}));

    EXPECT_TRUE(c.dataplane.idle_spin);
    EXPECT_EQ(c.dataplane.idle_sleep_max_us, 150u);
    EXPECT_EQ(c.dataplane.idle_polls_before_sleep, 64u);
    EXPECT_EQ(c.dataplane.idle_yield_us, 40u);
    EXPECT_EQ(c.dataplane.mbufs, 4095u);
    EXPECT_EQ(c.dataplane.punt_ring, 2048u);
    EXPECT_EQ(c.dataplane.neighbour_capacity, 128u);
    EXPECT_EQ(c.dataplane.neighbour_reachable_s, 20u);
    EXPECT_EQ(c.dataplane.neighbour_stale_s, 600u);
    EXPECT_EQ(c.dataplane.arp_probe_interval_ms, 250u);
    EXPECT_EQ(c.dataplane.arp_probes, 5u);

    ASSERT_EQ(c.ports.size(), 2u);
    EXPECT_EQ(c.ports[0].name, "inside");
    EXPECT_EQ(c.ports[0].role, PortRoleCfg::internal);
    EXPECT_EQ(c.ports[0].device, "net_af_packet0,iface=veth-in");
    EXPECT_EQ(c.ports[0].address.addr, 0xC6120101u);  // 198.18.1.1
    EXPECT_EQ(c.ports[0].address.prefix_len, 24);
    EXPECT_FALSE(c.ports[0].next_hop.has_value());
    EXPECT_EQ(c.ports[1].name, "outside");
    EXPECT_EQ(c.ports[1].role, PortRoleCfg::external);
    EXPECT_EQ(c.ports[1].device, "net_af_packet1,iface=veth-out");
    EXPECT_EQ(c.ports[1].address.addr, 0xC6126401u);  // 198.18.100.1
    EXPECT_EQ(c.ports[1].address.prefix_len, 24);
    ASSERT_TRUE(c.ports[1].next_hop.has_value());
    EXPECT_EQ(*c.ports[1].next_hop, 0xC61264FEu);  // 198.18.100.254

    ASSERT_EQ(c.peers.size(), 1u);
    EXPECT_EQ(c.peers[0].party, "beta");
    EXPECT_EQ(c.peers[0].party_id, 2);
    EXPECT_EQ(c.peers[0].address, 0xC6126402u);  // 198.18.100.2
    EXPECT_EQ(c.peers[0].key, (std::vector<uint8_t>{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                                                     0xbb, 0xcc, 0xdd, 0xee, 0xff}));
}

TEST(Config, TwoPeersAreKeptInFileOrder) {
    const fedgate::Config c = parse_config(kGood + "\n" + kGammaPeer, "test.toml");
    ASSERT_EQ(c.peers.size(), 2u);
    EXPECT_EQ(c.peers[0].party, "beta");
    EXPECT_EQ(c.peers[1].party, "gamma");
    EXPECT_EQ(c.peers[1].party_id, 3);
    EXPECT_EQ(c.peers[1].address, 0xC6126403u);
    EXPECT_EQ(c.peers[1].key.front(), 0xff);
    EXPECT_EQ(c.peers[1].key.back(), 0x00);
}

TEST(Config, MissingOptionalKeysTakeTheNamedDefaults) {
    const std::string text = R"([gateway]
party = "alpha"
party_id = 7

[eal]
args = []

[[port]]
name = "inside"
role = "internal"
device = "net_tap0"
address = "198.18.1.1/24"

[[port]]
name = "outside"
role = "external"
device = "net_tap1"
address = "198.18.100.1/24"
)";
    const fedgate::Config c = parse_config(text, "test.toml");

    EXPECT_EQ(c.party_id, 7);
    EXPECT_EQ(c.socket, "/run/fedgate/fedgated.sock");
    EXPECT_EQ(c.state_dir, "/var/lib/fedgate");
    EXPECT_TRUE(c.eal_args.empty());
    EXPECT_FALSE(c.dataplane.idle_spin);
    EXPECT_EQ(c.dataplane.idle_sleep_max_us, 200u);
    EXPECT_EQ(c.dataplane.idle_polls_before_sleep, 4u);
    EXPECT_EQ(c.dataplane.idle_yield_us, 300u);
    EXPECT_EQ(c.dataplane.mbufs, 8191u);
    EXPECT_EQ(c.dataplane.punt_ring, 4096u);
    EXPECT_EQ(c.dataplane.neighbour_capacity, 4096u);
    EXPECT_EQ(c.dataplane.neighbour_reachable_s, 30u);
    EXPECT_EQ(c.dataplane.neighbour_stale_s, 300u);
    EXPECT_EQ(c.dataplane.arp_probe_interval_ms, 500u);
    EXPECT_EQ(c.dataplane.arp_probes, 3u);
    ASSERT_EQ(c.ports.size(), 2u);
    EXPECT_FALSE(c.ports[0].next_hop.has_value());
    EXPECT_FALSE(c.ports[1].next_hop.has_value());
    EXPECT_TRUE(c.peers.empty());
}

TEST(Config, IdleYieldZeroTurnsTheYieldsOffAndTooLongIsRefused) {
    EXPECT_EQ(parse_config(replaced(kGood, "idle_yield_us = 40", "idle_yield_us = 0"), "test.toml").dataplane.idle_yield_us, 0u);
    const std::string text = replaced(kGood, "idle_yield_us = 40", "idle_yield_us = 200000");
    EXPECT_TRUE(rejects(text, "dataplane.idle_yield_us", "200000 is out of range 0..100000", line_of(text, "idle_yield_us")));
}

TEST(Config, IdleBackoffMeansNoSpin) {
    const fedgate::Config c = parse_config(replaced(kGood, "idle = \"spin\"", "idle = \"backoff\""), "test.toml");
    EXPECT_FALSE(c.dataplane.idle_spin);
}

// ---- bad files: TOML itself ----

TEST(ConfigErrors, TomlSyntaxErrorNamesItsLine) {
    const std::string text = replaced(kGood, "party_id = 1\n", "party_id = = 1\n");
    try {
        parse_config(text, "test.toml");
        FAIL() << "parsed without error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.key(), "");
        EXPECT_EQ(std::string(e.what()).rfind("test.toml:4:", 0), 0u) << e.what();
    }
}

TEST(ConfigErrors, TomlSyntaxErrorLaterInTheFileNamesThatLine) {
    const std::string text = replaced(kGood, "key = \"0011", "key = 0011\"");
    try {
        parse_config(text, "test.toml");
        FAIL() << "parsed without error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("test.toml:" + std::to_string(line_of(text, "key = 0011")) + ":", 0), 0u)
            << e.what();
    }
}

// ---- bad files: [gateway] ----

TEST(ConfigErrors, MissingGatewayTable) {
    EXPECT_TRUE(rejects(file_of("", kEal, kDataplane, kInsidePort + kOutsidePort, kBetaPeer), "gateway",
                        "missing table [gateway] (required)", 0));
}

TEST(ConfigErrors, GatewayThatIsNotATable) {
    const std::string text = "gateway = 5\n" + file_of("", kEal, kDataplane, kInsidePort + kOutsidePort, "");
    EXPECT_TRUE(rejects(text, "gateway", "must be a table [gateway]", 1));
}

TEST(ConfigErrors, MissingPartyPointsAtTheGatewayHeader) {
    const std::string text = replaced(kGood, "party = \"alpha\"\n", "");
    EXPECT_TRUE(rejects(text, "gateway.party", "missing (required)", line_of(text, "[gateway]")));
}

TEST(ConfigErrors, PartyWithASpaceIsNotAName) {
    const std::string text = replaced(kGood, "party = \"alpha\"", "party = \"al pha\"");
    EXPECT_TRUE(rejects(text, "gateway.party", "'al pha' must be 1-32 letters, digits, '-' or '_'",
                        line_of(text, "al pha")));
}

TEST(ConfigErrors, PartyIdZeroIsOutOfRange) {
    const std::string text = replaced(kGood, "party_id = 1\n", "party_id = 0\n");
    EXPECT_TRUE(rejects(text, "gateway.party_id", "0 is out of range 1..65535", 4));
}

TEST(ConfigErrors, PartyId70000IsOutOfRange) {
    const std::string text = replaced(kGood, "party_id = 1\n", "party_id = 70000\n");
    EXPECT_TRUE(rejects(text, "gateway.party_id", "70000 is out of range 1..65535", 4));
}

TEST(ConfigErrors, PartyIdAsAStringIsNotAnInteger) {
    const std::string text = replaced(kGood, "party_id = 1\n", "party_id = \"1\"\n");
    EXPECT_TRUE(rejects(text, "gateway.party_id", "must be an integer", 4));
}

TEST(ConfigErrors, RelativeSocketPath) {
    const std::string text = replaced(kGood, "socket = \"/tmp/fedgate-test/alpha.sock\"", "socket = \"fedgated.sock\"");
    EXPECT_TRUE(rejects(text, "gateway.socket", "'fedgated.sock' must be an absolute path", 5));
}

TEST(ConfigErrors, SocketPathTooLongForAUnixSocket) {
    const std::string path = "/" + std::string(107, 's');
    const std::string text = replaced(kGood, "socket = \"/tmp/fedgate-test/alpha.sock\"", "socket = \"" + path + "\"");
    EXPECT_TRUE(rejects(text, "gateway.socket", "path longer than a Unix socket allows (107 bytes)", 5));
}

TEST(ConfigErrors, RelativeStateDir) {
    const std::string text = replaced(kGood, "state_dir = \"/tmp/fedgate-test/alpha-state\"", "state_dir = \"state\"");
    EXPECT_TRUE(rejects(text, "gateway.state_dir", "'state' must be an absolute path", 6));
}

TEST(ConfigErrors, UnknownKeyAtTopLevel) {
    const std::string text = replaced(kGood, "# fedgate test configuration\n", "# fedgate test configuration\ncolour = \"blue\"\n");
    EXPECT_TRUE(rejects(text, "colour", "unknown key (known here: gateway, eal, dataplane, nat, resolve, connect, log, metrics, cluster, port, peer, import, export)", 2));
}

TEST(ConfigErrors, UnknownKeyInGateway) {
    const std::string text = replaced(kGood, "party_id = 1\n", "party_id = 1\npartyid = 1\n");
    EXPECT_TRUE(rejects(text, "gateway.partyid", "unknown key (known here: party, party_id, socket, state_dir)", 5));
}

// ---- bad files: [eal] ----

TEST(ConfigErrors, MissingEalTable) {
    EXPECT_TRUE(rejects(file_of(kGateway, "", kDataplane, kInsidePort + kOutsidePort, kBetaPeer), "eal",
                        "missing table [eal] (required)", 0));
}

TEST(ConfigErrors, EalArgsAsOneStringIsNotAList) {
    const std::string text = replaced(kGood, "args = [\"--no-huge\", \"--no-shconf\", \"-l\", \"0-1\"]", "args = \"--no-huge\"");
    EXPECT_TRUE(rejects(text, "eal.args", "must be a list of strings", line_of(text, "args =")));
}

TEST(ConfigErrors, EalArgsWithANumberIsNotAListOfStrings) {
    const std::string text = replaced(kGood, "args = [\"--no-huge\", \"--no-shconf\", \"-l\", \"0-1\"]", "args = [\"-l\", 1]");
    EXPECT_TRUE(rejects(text, "eal.args", "must be a list of strings", line_of(text, "args =")));
}

TEST(ConfigErrors, MissingEalArgs) {
    const std::string text = replaced(kGood, "args = [\"--no-huge\", \"--no-shconf\", \"-l\", \"0-1\"]\n", "");
    EXPECT_TRUE(rejects(text, "eal.args", "missing (required)", line_of(text, "[eal]")));
}

// ---- bad files: [dataplane] ----

TEST(ConfigErrors, IdleSleepyIsNeitherBackoffNorSpin) {
    const std::string text = replaced(kGood, "idle = \"spin\"", "idle = \"sleepy\"");
    EXPECT_TRUE(rejects(text, "dataplane.idle", "'sleepy' must be \"backoff\" or \"spin\"", line_of(text, "sleepy")));
}

TEST(ConfigErrors, FiveMbufsIsOutOfRange) {
    const std::string text = replaced(kGood, "mbufs = 4095", "mbufs = 5");
    EXPECT_TRUE(rejects(text, "dataplane.mbufs", "5 is out of range 1023..4194304", line_of(text, "mbufs = 5")));
}

TEST(ConfigErrors, PuntRingNotAPowerOfTwo) {
    const std::string text = replaced(kGood, "punt_ring = 2048", "punt_ring = 3000");
    EXPECT_TRUE(rejects(text, "dataplane.punt_ring", "3000 is not a power of two (a DPDK ring's size): 4096, 65536, ...",
                        line_of(text, "punt_ring = 3000")));
}

TEST(ConfigErrors, PuntRingOutOfRange) {
    const std::string small = replaced(kGood, "punt_ring = 2048", "punt_ring = 128");
    EXPECT_TRUE(rejects(small, "dataplane.punt_ring", "128 is out of range 256..4194304", line_of(small, "punt_ring = 128")));
    const std::string big = replaced(kGood, "punt_ring = 2048", "punt_ring = 8388608");
    EXPECT_TRUE(rejects(big, "dataplane.punt_ring", "8388608 is out of range 256..4194304", line_of(big, "punt_ring = 8388608")));
}

TEST(ConfigErrors, ZeroArpProbesIsOutOfRange) {
    const std::string text = replaced(kGood, "arp_probes = 5", "arp_probes = 0");
    EXPECT_TRUE(rejects(text, "dataplane.arp_probes", "0 is out of range 1..100", line_of(text, "arp_probes = 0")));
}

TEST(ConfigErrors, NeighbourCapacityAboveItsRange) {
    const std::string text = replaced(kGood, "neighbour_capacity = 128", "neighbour_capacity = 2000000");
    EXPECT_TRUE(rejects(text, "dataplane.neighbour_capacity", "2000000 is out of range 16..1048576",
                        line_of(text, "neighbour_capacity")));
}

TEST(ConfigErrors, StaleTimeBelowReachableTime) {
    const std::string text = replaced(kGood, "neighbour_stale_s = 600", "neighbour_stale_s = 10");
    EXPECT_TRUE(rejects(text, "dataplane.neighbour_stale_s", "must not be below neighbour_reachable_s",
                        line_of(text, "neighbour_stale_s = 10")));
}

TEST(ConfigErrors, ReachableTimeAboveTheDefaultStaleTime) {
    // neighbour_stale_s is absent, so the error points at the [dataplane] header.
    const std::string text = file_of(kGateway, kEal, "[dataplane]\nneighbour_reachable_s = 400\n",
                                     kInsidePort + kOutsidePort, kBetaPeer);
    EXPECT_TRUE(rejects(text, "dataplane.neighbour_stale_s", "must not be below neighbour_reachable_s",
                        line_of(text, "[dataplane]")));
}

TEST(ConfigErrors, UnknownKeyInDataplane) {
    const std::string text = replaced(kGood, "mbufs = 4095\n", "mbufs = 4095\nmbuf_cache = 32\n");
    EXPECT_TRUE(rejects(text, "dataplane.mbuf_cache",
                        "unknown key (known here: workers, idle, idle_sleep_max_us, idle_polls_before_sleep, idle_yield_us, mbufs, punt_ring, "
                        "neighbour_capacity, "
                        "neighbour_reachable_s, neighbour_stale_s, arp_probe_interval_ms, arp_probes)",
                        line_of(text, "mbuf_cache")));
}

// ---- bad files: one [[port]] ----

TEST(ConfigErrors, MisspelledOptionalPortKeyIsUnknown) {
    const std::string text = replaced(kGood, "next_hop = ", "next_hpo = ");
    EXPECT_TRUE(rejects(text, "port[1].next_hpo", "unknown key (known here: name, role, device, address, next_hop, static_neighbours)", line_of(text, "next_hpo")));
}

TEST(ConfigErrors, ExtraMisspelledAddressKeyIsUnknown) {
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"\n",
                                      "address = \"198.18.100.1/24\"\nadress = \"198.18.100.1/24\"\n");
    EXPECT_TRUE(rejects(text, "port[1].adress", "unknown key (known here: name, role, device, address, next_hop, static_neighbours)", line_of(text, "adress")));
}

TEST(ConfigErrors, MisspelledRequiredKeyIsNamedAsTheTypo) {
    // Unknown keys are checked before required ones, so the message points at the typo itself.
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"", "adress = \"198.18.100.1/24\"");
    EXPECT_TRUE(rejects(text, "port[1].adress", "unknown key (known here: name, role, device, address, next_hop, static_neighbours)", line_of(text, "adress")));
}

TEST(ConfigErrors, UnknownPortRole) {
    const std::string text = replaced(kGood, "role = \"internal\"", "role = \"dmz\"");
    EXPECT_TRUE(rejects(text, "port[0].role", "'dmz' must be \"internal\" or \"external\"", line_of(text, "dmz")));
}

TEST(ConfigErrors, EmptyDevice) {
    const std::string text = replaced(kGood, "device = \"net_af_packet0,iface=veth-in\"", "device = \"\"");
    EXPECT_TRUE(rejects(text, "port[0].device",
                        "must not be empty (a vdev such as net_af_packet0,iface=eth1 or a PCI address)",
                        line_of(text, "device = \"\"")));
}

TEST(ConfigErrors, PortNameWithASlash) {
    const std::string text = replaced(kGood, "name = \"inside\"", "name = \"in/side\"");
    EXPECT_TRUE(rejects(text, "port[0].name", "'in/side' must be 1-32 letters, digits, '-' or '_'",
                        line_of(text, "in/side")));
}

TEST(ConfigErrors, AddressWithoutPrefixLength) {
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"", "address = \"198.18.100.1\"");
    EXPECT_TRUE(rejects(text, "port[1].address",
                        "'198.18.100.1' is not an IPv4 address with prefix length, like 198.18.1.1/24",
                        line_of(text, "\"198.18.100.1\"")));
}

TEST(ConfigErrors, AddressWithAnOctetAbove255) {
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"", "address = \"198.18.300.1/24\"");
    EXPECT_TRUE(rejects(text, "port[1].address",
                        "'198.18.300.1/24' is not an IPv4 address with prefix length, like 198.18.1.1/24",
                        line_of(text, "198.18.300.1")));
}

TEST(ConfigErrors, AddressWithPrefixLength33) {
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"", "address = \"198.18.100.1/33\"");
    EXPECT_TRUE(rejects(text, "port[1].address",
                        "'198.18.100.1/33' is not an IPv4 address with prefix length, like 198.18.1.1/24",
                        line_of(text, "/33")));
}

TEST(ConfigErrors, AddressThatIsTheNetworkAddress) {
    const std::string text = replaced(kGood, "address = \"198.18.1.1/24\"", "address = \"198.18.1.0/24\"");
    EXPECT_TRUE(rejects(text, "port[0].address", "'198.18.1.0/24' is the network or broadcast address of its subnet",
                        line_of(text, "198.18.1.0/24")));
}

TEST(ConfigErrors, AddressThatIsTheBroadcastAddress) {
    const std::string text = replaced(kGood, "address = \"198.18.1.1/24\"", "address = \"198.18.1.255/24\"");
    EXPECT_TRUE(rejects(text, "port[0].address",
                        "'198.18.1.255/24' is the network or broadcast address of its subnet",
                        line_of(text, "198.18.1.255/24")));
}

TEST(ConfigErrors, NextHopOutsideThePortSubnet) {
    const std::string text = replaced(kGood, "next_hop = \"198.18.100.254\"", "next_hop = \"198.18.101.254\"");
    EXPECT_TRUE(rejects(text, "port[1].next_hop", "'198.18.101.254' is not inside 198.18.100.1/24",
                        line_of(text, "next_hop")));
}

TEST(ConfigErrors, NextHopThatIsThePortsOwnAddress) {
    const std::string text = replaced(kGood, "next_hop = \"198.18.100.254\"", "next_hop = \"198.18.100.1\"");
    EXPECT_TRUE(rejects(text, "port[1].next_hop", "'198.18.100.1' is the port's own address", line_of(text, "next_hop")));
}

TEST(ConfigErrors, NextHopThatIsNotAnAddress) {
    const std::string text = replaced(kGood, "next_hop = \"198.18.100.254\"", "next_hop = \"gateway\"");
    EXPECT_TRUE(rejects(text, "port[1].next_hop", "'gateway' is not an IPv4 address", line_of(text, "next_hop")));
}

// ---- bad files: the ports together ----

TEST(ConfigErrors, DuplicatePortName) {
    const std::string text = replaced(kGood, "name = \"outside\"", "name = \"inside\"");
    EXPECT_TRUE(rejects(text, "port[1].name", "'inside' is already the name of port[0]",
                        line_of(text, "name = \"inside\"", 2)));
}

TEST(ConfigErrors, DuplicateDevice) {
    const std::string text =
        replaced(kGood, "device = \"net_af_packet1,iface=veth-out\"", "device = \"net_af_packet0,iface=veth-in\"");
    EXPECT_TRUE(rejects(text, "port[1].device", "'net_af_packet0,iface=veth-in' names the same device as port 'inside'",
                        line_of(text, "device = \"net_af_packet0", 2)));
}

TEST(ConfigErrors, SameDeviceNameWithOtherArgumentsIsTheSameDevice) {
    const std::string text =
        replaced(kGood, "device = \"net_af_packet1,iface=veth-out\"", "device = \"net_af_packet0,iface=veth-out\"");
    EXPECT_TRUE(rejects(text, "port[1].device", "'net_af_packet0,iface=veth-out' names the same device as port 'inside'",
                        line_of(text, "device = \"net_af_packet0,iface=veth-out")));
}

TEST(ConfigErrors, HostPrefixLeavesNoNeighbours) {
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"", "address = \"198.18.100.1/32\"");
    EXPECT_TRUE(rejects(text, "port[1].address",
                        "'198.18.100.1/32' leaves the port no neighbours: use a prefix of /31 or shorter",
                        line_of(text, "address = \"198.18.100.1/32")));
}

TEST(ConfigErrors, OverlappingSubnets) {
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"", "address = \"198.18.1.2/16\"");
    EXPECT_TRUE(rejects(text, "port[1].address", "198.18.1.2/16 overlaps 198.18.1.1/24 of port 'inside'",
                        line_of(text, "198.18.1.2/16")));
}

TEST(ConfigErrors, NoPortsAtAll) {
    EXPECT_TRUE(rejects(file_of(kGateway, kEal, kDataplane, "", kBetaPeer), "port",
                        "at least one [[port]] with role \"internal\" and one with \"external\" are required", 0));
}

TEST(ConfigErrors, ZeroExternalPorts) {
    const std::string text = replaced(kGood, "role = \"external\"", "role = \"internal\"");
    EXPECT_TRUE(rejects(text, "port", "exactly one [[port]] must have role \"external\" (found 0)",
                        line_of(text, "[[port]]")));
}

TEST(ConfigErrors, TwoExternalPorts) {
    const std::string text = replaced(kGood, "role = \"internal\"", "role = \"external\"");
    EXPECT_TRUE(rejects(text, "port", "exactly one [[port]] must have role \"external\" (found 2)",
                        line_of(text, "[[port]]")));
}

TEST(ConfigErrors, NoInternalPort) {
    const std::string text = file_of(kGateway, kEal, kDataplane, kOutsidePort, kBetaPeer);
    EXPECT_TRUE(rejects(text, "port", "at least one [[port]] must have role \"internal\"", line_of(text, "[[port]]")));
}

TEST(ConfigErrors, TwoPortsWithNextHops) {
    const std::string text = replaced(kGood, "address = \"198.18.1.1/24\"\n",
                                      "address = \"198.18.1.1/24\"\nnext_hop = \"198.18.1.254\"\n");
    EXPECT_TRUE(rejects(text, "port", "only one port may have a next_hop (the default route)",
                        line_of(text, "[[port]]")));
}

// ---- bad files: [[peer]] ----

TEST(ConfigErrors, PeerWithThisGatewaysPartyId) {
    const std::string text = replaced(kGood, "party_id = 2", "party_id = 1");
    EXPECT_TRUE(rejects(text, "peer[0].party_id", "a peer cannot be this gateway's own party",
                        line_of(text, "party_id = 1", 2)));
}

TEST(ConfigErrors, PeerWithThisGatewaysPartyName) {
    const std::string text = replaced(kGood, "party = \"beta\"", "party = \"alpha\"");
    EXPECT_TRUE(rejects(text, "peer[0].party", "a peer cannot be this gateway's own party",
                        line_of(text, "party = \"alpha\"", 2)));
}

TEST(ConfigErrors, SamePeerPartyTwice) {
    const std::string text = kGood + "\n" + replaced(kGammaPeer, "party = \"gamma\"", "party = \"beta\"");
    EXPECT_TRUE(rejects(text, "peer[1].party", "'beta' is listed twice", line_of(text, "party = \"beta\"", 2)));
}

TEST(ConfigErrors, SamePeerPartyIdTwice) {
    const std::string text = kGood + "\n" + replaced(kGammaPeer, "party_id = 3", "party_id = 2");
    EXPECT_TRUE(rejects(text, "peer[1].party_id", "2 is listed twice", line_of(text, "party_id = 2", 2)));
}

TEST(ConfigErrors, SamePeerAddressTwice) {
    const std::string text = kGood + "\n" + replaced(kGammaPeer, "198.18.100.3", "198.18.100.2");
    EXPECT_TRUE(rejects(text, "peer[1].address", "198.18.100.2 is listed twice",
                        line_of(text, "address = \"198.18.100.2\"", 2)));
}

TEST(ConfigErrors, PeerAddressThatIsNotAnAddress) {
    const std::string text = replaced(kGood, "address = \"198.18.100.2\"", "address = \"198.18.100.2/24\"");
    EXPECT_TRUE(rejects(text, "peer[0].address", "'198.18.100.2/24' is not an IPv4 address",
                        line_of(text, "198.18.100.2/24")));
}

TEST(ConfigErrors, PeerKeyOfOddLength) {
    const std::string text = replaced(kGood, "key = \"00112233445566778899aabbccddeeff\"",
                                      "key = \"00112233445566778899aabbccddeeff0\"");
    EXPECT_TRUE(rejects(text, "peer[0].key", "must be an even number of hex digits", line_of(text, "key =")));
}

TEST(ConfigErrors, PeerKeyWithNonHexDigits) {
    const std::string text = replaced(kGood, "key = \"00112233445566778899aabbccddeeff\"",
                                      "key = \"00112233445566778899aabbccddeegg\"");
    EXPECT_TRUE(rejects(text, "peer[0].key", "must be an even number of hex digits", line_of(text, "key =")));
}

TEST(ConfigErrors, PeerKeyTooShort) {
    const std::string text =
        replaced(kGood, "key = \"00112233445566778899aabbccddeeff\"", "key = \"00112233445566778899aabbccddee\"");
    EXPECT_TRUE(rejects(text, "peer[0].key", "is 15 bytes; at least 16 are needed", line_of(text, "key =")));
}

TEST(ConfigErrors, EmptyPeerKeyIsCalledEmpty) {
    const std::string text = replaced(kGood, "key = \"00112233445566778899aabbccddeeff\"", "key = \"\"");
    EXPECT_TRUE(rejects(text, "peer[0].key", "must not be empty (hex, at least 16 bytes)", line_of(text, "key =")));
}

TEST(ConfigErrors, MissingPeerKeyPointsAtThePeerHeader) {
    const std::string text = replaced(kGood, "key = \"00112233445566778899aabbccddeeff\"\n", "");
    EXPECT_TRUE(rejects(text, "peer[0].key",
                        "missing (required): give key_file (a file of hex, mode 0600, owned by root), key_credential or key",
                        line_of(text, "[[peer]]")));
}

// ---- [nat], [[import]] and [[export]] ----

const std::string kNat = R"([nat]
port_range = "30000-39999"
max_sessions = 50000
tcp_established_s = 3600
tcp_transitory_s = 120
tcp_closing_s = 5
udp_s = 90
)";

// Host bits in the second allow prefix are cleared when read.
const std::string kImportTcp = R"([[import]]
cluster = "train-1"
proto = "tcp"
port = 8080
peer = "beta"
peer_port = 9000
allow = ["198.18.1.0/25", "198.18.1.77/24"]
)";

const std::string kImportUdp = R"([[import]]
cluster = "train-2"
proto = "udp"
port = 8080
peer = "gamma"
peer_port = 9001
)";

// tcp/8080 is also an import above: imports and exports are different tables.
const std::string kExportTcp = R"([[export]]
cluster = "train-1"
proto = "tcp"
port = 8080
node = "198.18.1.10:50051"
allow_parties = ["beta", "gamma"]
)";

const std::string kExportUdp = R"([[export]]
cluster = "train-2"
proto = "udp"
port = 9100
node = "198.18.1.11:5353"
)";

// kGood with a second peer (gamma), then `nat`, `imports` and `exports`.
std::string mapped_file(const std::string& nat, const std::string& imports, const std::string& exports) {
    return kGood + "\n" + kGammaPeer + "\n" + nat + "\n" + imports + "\n" + exports;
}

const std::string kMapped = mapped_file(kNat, kImportTcp + "\n" + kImportUdp, kExportTcp + "\n" + kExportUdp);

TEST(Config, NatImportAndExportTablesParseEveryValue) {
    const fedgate::Config c = parse_config(kMapped, "test.toml");

    EXPECT_EQ(c.nat.port_lo, 30000);
    EXPECT_EQ(c.nat.port_hi, 39999);
    EXPECT_EQ(c.nat.max_sessions, 50000u);
    EXPECT_EQ(c.nat.tcp_established_s, 3600u);
    EXPECT_EQ(c.nat.tcp_transitory_s, 120u);
    EXPECT_EQ(c.nat.tcp_closing_s, 5u);
    EXPECT_EQ(c.nat.udp_s, 90u);

    ASSERT_EQ(c.imports.size(), 2u);
    const fedgate::ImportMapping& i0 = c.imports[0];
    EXPECT_EQ(i0.cluster, "train-1");
    EXPECT_EQ(i0.proto, fedgate::Proto::tcp);
    EXPECT_EQ(i0.port, 8080);
    EXPECT_EQ(i0.peer, "beta");
    EXPECT_EQ(i0.peer_port, 9000);
    ASSERT_EQ(i0.allow.size(), 2u);
    EXPECT_EQ(i0.allow[0].addr, 0xC6120100u);  // 198.18.1.0
    EXPECT_EQ(i0.allow[0].prefix_len, 25);
    EXPECT_EQ(i0.allow[1].addr, 0xC6120100u);  // 198.18.1.77/24 -> 198.18.1.0/24
    EXPECT_EQ(i0.allow[1].prefix_len, 24);
    EXPECT_EQ(i0.source, fedgate::MapSource::config);
    const fedgate::ImportMapping& i1 = c.imports[1];
    EXPECT_EQ(i1.cluster, "train-2");
    EXPECT_EQ(i1.proto, fedgate::Proto::udp);
    EXPECT_EQ(i1.port, 8080);
    EXPECT_EQ(i1.peer, "gamma");
    EXPECT_EQ(i1.peer_port, 9001);
    EXPECT_TRUE(i1.allow.empty());
    EXPECT_EQ(i1.source, fedgate::MapSource::config);

    ASSERT_EQ(c.exports.size(), 2u);
    const fedgate::ExportMapping& e0 = c.exports[0];
    EXPECT_EQ(e0.cluster, "train-1");
    EXPECT_EQ(e0.proto, fedgate::Proto::tcp);
    EXPECT_EQ(e0.port, 8080);
    EXPECT_EQ(e0.node, 0xC612010Au);  // 198.18.1.10
    EXPECT_EQ(e0.node_port, 50051);
    EXPECT_EQ(e0.allow_parties, (std::vector<std::string>{"beta", "gamma"}));
    EXPECT_EQ(e0.source, fedgate::MapSource::config);
    const fedgate::ExportMapping& e1 = c.exports[1];
    EXPECT_EQ(e1.cluster, "train-2");
    EXPECT_EQ(e1.proto, fedgate::Proto::udp);
    EXPECT_EQ(e1.port, 9100);
    EXPECT_EQ(e1.node, 0xC612010Bu);  // 198.18.1.11
    EXPECT_EQ(e1.node_port, 5353);
    EXPECT_TRUE(e1.allow_parties.empty());
    EXPECT_EQ(e1.source, fedgate::MapSource::config);
}

TEST(Config, NatDefaultsWithoutANatTable) {
    const fedgate::Config c = parse_config(kGood, "test.toml");
    EXPECT_EQ(c.nat.port_lo, 20000);
    EXPECT_EQ(c.nat.port_hi, 59999);
    EXPECT_EQ(c.nat.max_sessions, 262144u);
    EXPECT_EQ(c.nat.tcp_established_s, 7440u);
    EXPECT_EQ(c.nat.tcp_transitory_s, 240u);
    EXPECT_EQ(c.nat.tcp_closing_s, 10u);
    EXPECT_EQ(c.nat.udp_s, 300u);
    EXPECT_TRUE(c.imports.empty());
    EXPECT_TRUE(c.exports.empty());
}

TEST(Config, NatDefaultsWithAnEmptyNatTable) {
    const fedgate::Config c = parse_config(kGood + "\n[nat]\n", "test.toml");
    EXPECT_EQ(c.nat.port_lo, fedgate::kDefaultNatPortLo);
    EXPECT_EQ(c.nat.port_hi, fedgate::kDefaultNatPortHi);
    EXPECT_EQ(c.nat.max_sessions, fedgate::kDefaultMaxSessions);
    EXPECT_EQ(c.nat.tcp_established_s, fedgate::kDefaultTcpEstablishedS);
    EXPECT_EQ(c.nat.tcp_transitory_s, fedgate::kDefaultTcpTransitoryS);
    EXPECT_EQ(c.nat.tcp_closing_s, fedgate::kDefaultTcpClosingS);
    EXPECT_EQ(c.nat.udp_s, fedgate::kDefaultUdpS);
}

TEST(Config, NatRangeOfExactly1024PortsIsEnough) {
    const fedgate::Config c =
        parse_config(replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"30000-31023\""), "test.toml");
    EXPECT_EQ(c.nat.port_lo, 30000);
    EXPECT_EQ(c.nat.port_hi, 31023);
}

// Session-port allocation skips mapped ports, so a mapping may use a port inside [nat] port_range.
TEST(Config, MappedPortsInsideTheNatRangeAreAllowed) {
    const std::string imports = replaced(kImportTcp, "port = 8080", "port = 30000") + "\n" +
                                replaced(kImportUdp, "port = 8080", "port = 39999");
    const std::string exports = replaced(kExportTcp, "port = 8080", "port = 35000");
    const fedgate::Config c = parse_config(mapped_file(kNat, imports, exports), "test.toml");
    ASSERT_EQ(c.imports.size(), 2u);
    EXPECT_EQ(c.imports[0].port, 30000);
    EXPECT_EQ(c.imports[1].port, 39999);
    ASSERT_EQ(c.exports.size(), 1u);
    EXPECT_EQ(c.exports[0].port, 35000);
}

TEST(Config, MappedPortInsideTheDefaultNatRangeIsAllowed) {
    const fedgate::Config c =
        parse_config(mapped_file("", replaced(kImportTcp, "port = 8080", "port = 50051"), ""), "test.toml");
    ASSERT_EQ(c.imports.size(), 1u);
    EXPECT_EQ(c.imports[0].port, 50051);
}

TEST(Config, SamePortAndProtoAsImportAndAsExportIsAllowed) {
    const fedgate::Config c = parse_config(mapped_file(kNat, kImportTcp, kExportTcp), "test.toml");
    ASSERT_EQ(c.imports.size(), 1u);
    ASSERT_EQ(c.exports.size(), 1u);
    EXPECT_EQ(c.imports[0].port, c.exports[0].port);
    EXPECT_EQ(c.imports[0].proto, c.exports[0].proto);
}

TEST(Config, SamePortOverTcpAndUdpIsAllowed) {
    const std::string exports = kExportTcp + "\n" + replaced(kExportUdp, "port = 9100", "port = 8080");
    const fedgate::Config c = parse_config(mapped_file(kNat, kImportTcp + "\n" + kImportUdp, exports), "test.toml");
    ASSERT_EQ(c.imports.size(), 2u);
    ASSERT_EQ(c.exports.size(), 2u);
    EXPECT_EQ(c.exports[1].port, 8080);
    EXPECT_EQ(c.exports[1].proto, fedgate::Proto::udp);
}

// ---- bad files: [nat] ----

const std::string kRangeMsg = "must be LO-HI within 1024-65535, at least 1024 ports";

TEST(ConfigErrors, NatPortRangeWithoutADash) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"30000\"");
    EXPECT_TRUE(rejects(text, "nat.port_range", "'30000' " + kRangeMsg, line_of(text, "port_range")));
}

TEST(ConfigErrors, NatPortRangeWithWordsForPorts) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"low-high\"");
    EXPECT_TRUE(rejects(text, "nat.port_range", "'low-high' " + kRangeMsg, line_of(text, "port_range")));
}

TEST(ConfigErrors, NatPortRangeWithNoHighEnd) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"30000-\"");
    EXPECT_TRUE(rejects(text, "nat.port_range", "'30000-' " + kRangeMsg, line_of(text, "port_range")));
}

TEST(ConfigErrors, NatPortRangeAsAnInteger) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = 30000");
    EXPECT_TRUE(rejects(text, "nat.port_range", "must be a string", line_of(text, "port_range")));
}

TEST(ConfigErrors, NatPortRangeOf1023PortsIsTooSmall) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"30000-31022\"");
    EXPECT_TRUE(rejects(text, "nat.port_range", "'30000-31022' " + kRangeMsg, line_of(text, "port_range")));
}

TEST(ConfigErrors, NatPortRangeLowAboveHigh) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"39999-30000\"");
    EXPECT_TRUE(rejects(text, "nat.port_range", "'39999-30000' " + kRangeMsg, line_of(text, "port_range")));
}

TEST(ConfigErrors, NatPortRangeBelow1024) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"1000-5000\"");
    EXPECT_TRUE(rejects(text, "nat.port_range", "'1000-5000' " + kRangeMsg, line_of(text, "port_range")));
}

TEST(ConfigErrors, NatPortRangeAbove65535) {
    const std::string text = replaced(kMapped, "port_range = \"30000-39999\"", "port_range = \"60000-70000\"");
    EXPECT_TRUE(rejects(text, "nat.port_range", "'60000-70000' " + kRangeMsg, line_of(text, "port_range")));
}

TEST(ConfigErrors, NatMaxSessionsBelowItsRange) {
    const std::string text = replaced(kMapped, "max_sessions = 50000", "max_sessions = 10");
    EXPECT_TRUE(rejects(text, "nat.max_sessions", "10 is out of range 1024..16777216", line_of(text, "max_sessions")));
}

TEST(ConfigErrors, NatEstablishedTimeoutBelowAMinute) {
    const std::string text = replaced(kMapped, "tcp_established_s = 3600", "tcp_established_s = 30");
    EXPECT_TRUE(rejects(text, "nat.tcp_established_s", "30 is out of range 60..604800",
                        line_of(text, "tcp_established_s")));
}

TEST(ConfigErrors, UnknownKeyInNat) {
    const std::string text = replaced(kMapped, "udp_s = 90\n", "udp_s = 90\nicmp_s = 30\n");
    EXPECT_TRUE(rejects(text, "nat.icmp_s",
                        "unknown key (known here: port_range, max_sessions, tcp_established_s, tcp_transitory_s, "
                        "tcp_closing_s, udp_s)",
                        line_of(text, "icmp_s")));
}

// ---- bad files: [[import]] ----

// kMapped's [nat] and peers, with one import (kImportTcp with `from` replaced by `to`) and no exports.
std::string with_import(const std::string& from, const std::string& to) {
    return mapped_file(kNat, replaced(kImportTcp, from, to), "");
}

TEST(ConfigErrors, ImportOfAnUnknownPeer) {
    const std::string text = with_import("peer = \"beta\"", "peer = \"delta\"");
    EXPECT_TRUE(rejects(text, "import[0].peer", "'delta' is not a configured peer party", line_of(text, "\"delta\"")));
}

TEST(ConfigErrors, ImportAllowThatIsNotAPrefix) {
    const std::string text = with_import("\"198.18.1.77/24\"", "\"198.18.1.77\"");
    EXPECT_TRUE(rejects(text, "import[0].allow", "'198.18.1.77' is not an IPv4 prefix like 198.18.1.0/24",
                        line_of(text, "allow =")));
}

TEST(ConfigErrors, ImportAllowThatIsNotAList) {
    const std::string text = with_import("allow = [\"198.18.1.0/25\", \"198.18.1.77/24\"]", "allow = \"198.18.1.0/25\"");
    EXPECT_TRUE(rejects(text, "import[0].allow", "must be a list of strings", line_of(text, "allow =")));
}

TEST(ConfigErrors, ImportWithNinePrefixesAllowed) {
    std::string nine;
    for (int i = 0; i < 9; ++i) nine += std::string(i == 0 ? "" : ", ") + "\"198.18.1." + std::to_string(i * 16) + "/28\"";
    const std::string text = with_import("allow = [\"198.18.1.0/25\", \"198.18.1.77/24\"]", "allow = [" + nine + "]");
    EXPECT_TRUE(rejects(text, "import[0].allow", "at most 8 prefixes", line_of(text, "allow =")));
}

TEST(ConfigErrors, ImportWithEightPrefixesIsFine) {
    std::string eight;
    for (int i = 0; i < 8; ++i) eight += std::string(i == 0 ? "" : ", ") + "\"198.18.1." + std::to_string(i * 16) + "/28\"";
    const fedgate::Config c = parse_config(
        with_import("allow = [\"198.18.1.0/25\", \"198.18.1.77/24\"]", "allow = [" + eight + "]"), "test.toml");
    ASSERT_EQ(c.imports.size(), 1u);
    EXPECT_EQ(c.imports[0].allow.size(), 8u);
    EXPECT_EQ(c.imports[0].allow[7].addr, 0xC6120170u);  // 198.18.1.112
}

TEST(ConfigErrors, ImportPortZero) {
    const std::string text = with_import("port = 8080", "port = 0");
    EXPECT_TRUE(rejects(text, "import[0].port", "0 is out of range 1..65535", line_of(text, "port = 0")));
}

TEST(ConfigErrors, SameImportProtoAndPortTwice) {
    const std::string second = replaced(replaced(kImportTcp, "cluster = \"train-1\"", "cluster = \"train-9\""),
                                        "peer_port = 9000", "peer_port = 9002");
    const std::string text = mapped_file(kNat, kImportTcp + "\n" + second, "");
    EXPECT_TRUE(rejects(text, "import[1].port", "tcp/8080 is already mapped by import[0]",
                        line_of(text, "port = 8080", 2)));
}

TEST(ConfigErrors, ImportWithAnUnknownProto) {
    const std::string text = with_import("proto = \"tcp\"", "proto = \"sctp\"");
    EXPECT_TRUE(rejects(text, "import[0].proto", "'sctp' must be \"tcp\" or \"udp\"", line_of(text, "sctp")));
}

TEST(ConfigErrors, ImportWithABadClusterName) {
    const std::string text = with_import("cluster = \"train-1\"", "cluster = \"train 1\"");
    EXPECT_TRUE(rejects(text, "import[0].cluster", "'train 1' must be 1-32 letters, digits, '-' or '_'",
                        line_of(text, "train 1")));
}

TEST(ConfigErrors, ImportPeerPortZero) {
    const std::string text = with_import("peer_port = 9000", "peer_port = 0");
    EXPECT_TRUE(rejects(text, "import[0].peer_port", "0 is out of range 1..65535", line_of(text, "peer_port")));
}

TEST(ConfigErrors, ImportMissingPeerPortPointsAtItsHeader) {
    const std::string text = with_import("peer_port = 9000\n", "");
    EXPECT_TRUE(rejects(text, "import[0].peer_port", "missing (required)", line_of(text, "[[import]]")));
}

TEST(ConfigErrors, UnknownKeyInImport) {
    const std::string text = with_import("peer_port = 9000\n", "peer_port = 9000\npeerport = 9000\n");
    EXPECT_TRUE(rejects(text, "import[0].peerport",
                        "unknown key (known here: cluster, proto, port, peer, peer_port, allow)",
                        line_of(text, "peerport")));
}

// ---- bad files: [[export]] ----

std::string with_export(const std::string& from, const std::string& to) {
    return mapped_file(kNat, "", replaced(kExportTcp, from, to));
}

TEST(ConfigErrors, ExportNodeWithoutAPort) {
    const std::string text = with_export("node = \"198.18.1.10:50051\"", "node = \"198.18.1.10\"");
    EXPECT_TRUE(rejects(text, "export[0].node", "'198.18.1.10' is not IP:PORT, like 198.18.2.10:8080",
                        line_of(text, "node =")));
}

TEST(ConfigErrors, ExportNodeWithPortZero) {
    const std::string text = with_export("node = \"198.18.1.10:50051\"", "node = \"198.18.1.10:0\"");
    EXPECT_TRUE(rejects(text, "export[0].node", "'198.18.1.10:0' is not IP:PORT, like 198.18.2.10:8080",
                        line_of(text, "node =")));
}

TEST(ConfigErrors, ExportNodeOutsideEveryInternalSubnet) {
    const std::string text = with_export("node = \"198.18.1.10:50051\"", "node = \"198.18.50.10:50051\"");
    EXPECT_TRUE(rejects(text, "export[0].node", "198.18.50.10 is not a node address on an internal port's subnet",
                        line_of(text, "node =")));
}

TEST(ConfigErrors, ExportNodeOnTheExternalSubnet) {
    const std::string text = with_export("node = \"198.18.1.10:50051\"", "node = \"198.18.100.10:50051\"");
    EXPECT_TRUE(rejects(text, "export[0].node", "198.18.100.10 is not a node address on an internal port's subnet",
                        line_of(text, "node =")));
}

TEST(ConfigErrors, ExportNodeThatIsTheInternalPortsOwnAddress) {
    const std::string text = with_export("node = \"198.18.1.10:50051\"", "node = \"198.18.1.1:50051\"");
    EXPECT_TRUE(rejects(text, "export[0].node", "198.18.1.1 is not a node address on an internal port's subnet",
                        line_of(text, "node =")));
}

TEST(ConfigErrors, ExportNodeThatIsTheSubnetsNetworkOrBroadcastAddress) {
    for (const char* node : {"198.18.1.0", "198.18.1.255"}) {
        const std::string text = with_export("node = \"198.18.1.10:50051\"", std::string("node = \"") + node + ":80\"");
        EXPECT_TRUE(rejects(text, "export[0].node", std::string(node) + " is not a node address on an internal port's subnet",
                            line_of(text, "node =")));
    }
}

TEST(ConfigErrors, ExportListingAPartyTwice) {
    const std::string text = with_export("[\"beta\", \"gamma\"]", "[\"beta\", \"beta\"]");
    EXPECT_TRUE(rejects(text, "export[0].allow_parties", "'beta' is listed twice", line_of(text, "allow_parties")));
}

TEST(Config, StaticNeighboursAreParsed) {
    const std::string text = replaced(kGood, "address = \"198.18.100.1/24\"\n",
                                      "address = \"198.18.100.1/24\"\nstatic_neighbours = [\"198.18.100.254 02:00:00:00:00:fe\"]\n");
    const fedgate::Config c = parse_config(text, "test.toml");
    ASSERT_EQ(c.ports[1].static_neighbours.size(), 1u);
    EXPECT_EQ(c.ports[1].static_neighbours[0].first, *fedgate::parse_ipv4("198.18.100.254"));
    EXPECT_EQ(c.ports[1].static_neighbours[0].second, (std::array<uint8_t, 6>{2, 0, 0, 0, 0, 0xfe}));
}

TEST(ConfigErrors, StaticNeighbourThatIsMalformedOrOffSubnet) {
    const auto with = [](const char* entry) {
        return replaced(kGood, "address = \"198.18.100.1/24\"\n",
                        std::string("address = \"198.18.100.1/24\"\nstatic_neighbours = [\"") + entry + "\"]\n");
    };
    std::string text = with("198.18.100.254");
    EXPECT_TRUE(rejects(text, "port[1].static_neighbours",
                        "'198.18.100.254' must be \"IP MAC\", like \"198.19.0.254 02:00:00:00:00:01\"",
                        line_of(text, "static_neighbours")));
    text = with("198.18.9.1 02:00:00:00:00:01");
    EXPECT_TRUE(rejects(text, "port[1].static_neighbours", "198.18.9.1 is not inside 198.18.100.1/24",
                        line_of(text, "static_neighbours")));
    text = with("198.18.100.9 01:00:5e:00:00:01");
    EXPECT_TRUE(rejects(text, "port[1].static_neighbours", "'198.18.100.9 01:00:5e:00:00:01': the MAC is a group address",
                        line_of(text, "static_neighbours")));
}

TEST(ConfigErrors, ExportToAnUnknownParty) {
    const std::string text = with_export("[\"beta\", \"gamma\"]", "[\"beta\", \"delta\"]");
    EXPECT_TRUE(rejects(text, "export[0].allow_parties", "'delta' is not a configured peer party",
                        line_of(text, "allow_parties")));
}

TEST(ConfigErrors, SameExportProtoAndPortTwice) {
    const std::string second = replaced(kExportTcp, "node = \"198.18.1.10:50051\"", "node = \"198.18.1.12:80\"");
    const std::string text = mapped_file(kNat, "", kExportTcp + "\n" + second);
    EXPECT_TRUE(rejects(text, "export[1].port", "tcp/8080 is already mapped by export[0]",
                        line_of(text, "port = 8080", 2)));
}

TEST(ConfigErrors, ExportWithAnUnknownProto) {
    const std::string text = with_export("proto = \"tcp\"", "proto = \"icmp\"");
    EXPECT_TRUE(rejects(text, "export[0].proto", "'icmp' must be \"tcp\" or \"udp\"", line_of(text, "icmp")));
}

TEST(ConfigErrors, UnknownKeyInExport) {
    const std::string text = with_export("allow_parties", "allow_party");
    EXPECT_TRUE(rejects(text, "export[0].allow_party", "unknown key (known here: cluster, proto, port, node, allow_parties)",
                        line_of(text, "allow_party")));
}

TEST(ConfigErrors, ImportThatIsNotAnArrayOfTables) {
    const std::string text = replaced(kGood, "# fedgate test configuration\n", "# fedgate test configuration\nimport = 5\n");
    EXPECT_TRUE(rejects(text, "import", "must be an array of tables [[import]]", 2));
}

// ---- files on disk ----

TEST(ConfigFile, MissingFileNamesThePath) {
    const std::string path = "/nonexistent-fedgate-test-dir/fedgated.toml";
    try {
        fedgate::load_config_file(path);
        FAIL() << "loaded a file that does not exist";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.file(), path);
        EXPECT_EQ(std::string(e.what()), path + ": cannot open: No such file or directory");
    }
}

// A file in the temporary directory, removed at the end of the test.
class TempFile {
public:
    explicit TempFile(const std::string& contents) {
        std::string tmpl = (std::filesystem::temp_directory_path() / "fedgate-config-test-XXXXXX").string();
        const int fd = ::mkstemp(tmpl.data());
        if (fd < 0) throw std::runtime_error("mkstemp failed");
        ::close(fd);
        path_ = tmpl;
        std::ofstream(path_) << contents;
    }
    ~TempFile() { std::remove(path_.c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

TEST(ConfigFile, RealFileLoadsAndRemembersItsPath) {
    const TempFile f(kGood);
    const fedgate::Config c = fedgate::load_config_file(f.path());
    EXPECT_EQ(c.source, f.path());
    EXPECT_EQ(c.party, "alpha");
    EXPECT_EQ(c.ports.size(), 2u);
    EXPECT_EQ(c.peers.size(), 1u);
}

TEST(ConfigFile, ErrorsInARealFileNameThatFile) {
    const TempFile f(replaced(kGood, "party_id = 1\n", "party_id = 0\n"));
    try {
        fedgate::load_config_file(f.path());
        FAIL() << "loaded a bad file";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.file(), f.path());
        EXPECT_EQ(e.key(), "gateway.party_id");
        EXPECT_EQ(std::string(e.what()).rfind(f.path() + ":4:", 0), 0u) << e.what();
    }
}

// ---- address helpers ----

TEST(Ipv4, ParsesDottedQuadToHostOrder) {
    EXPECT_EQ(fedgate::parse_ipv4("198.18.1.1"), 0xC6120101u);
    EXPECT_EQ(fedgate::parse_ipv4("0.0.0.0"), 0u);
    EXPECT_EQ(fedgate::parse_ipv4("255.255.255.255"), 0xFFFFFFFFu);
}

TEST(Ipv4, RejectsAnythingButADottedQuad) {
    for (const char* bad : {"", "198.18.1", "198.18.1.256", "198.18.1.1.1", " 198.18.1.1", "198.18.1.1 ",
                            "198.18.1.1/24", "a.b.c.d", "01.2.3.4", "::1"})
        EXPECT_FALSE(fedgate::parse_ipv4(bad).has_value()) << "'" << bad << "'";
}

TEST(Ipv4, FormatsHostOrderAsDottedQuad) {
    EXPECT_EQ(fedgate::format_ipv4(0xC6120101u), "198.18.1.1");
    EXPECT_EQ(fedgate::format_ipv4(0), "0.0.0.0");
    EXPECT_EQ(fedgate::format_ipv4(0xFFFFFFFFu), "255.255.255.255");
}

TEST(Ipv4, ParsesCidr) {
    const auto a = fedgate::parse_cidr("198.18.1.1/24");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->addr, 0xC6120101u);
    EXPECT_EQ(a->prefix_len, 24);
    EXPECT_EQ(a->str(), "198.18.1.1/24");

    const auto b = fedgate::parse_cidr("10.0.0.1/32");
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->addr, 0x0A000001u);
    EXPECT_EQ(b->prefix_len, 32);

    const auto c = fedgate::parse_cidr("128.0.0.0/1");
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->prefix_len, 1);
}

TEST(Ipv4, RejectsBadCidr) {
    for (const char* bad : {"198.18.1.1", "198.18.1.1/", "198.18.1.1/0", "198.18.1.1/33", "198.18.1.1/-1",
                            "198.18.1.1/2a", "198.18.1.1/100", "198.18.1/24", "198.18.1.300/24", "/24",
                            "198.18.1.1/24/8", "198.18.1.1/ 8"})
        EXPECT_FALSE(fedgate::parse_cidr(bad).has_value()) << "'" << bad << "'";
}

}  // namespace

// ---- [resolve] ----

namespace {
const std::string kResolve = R"([resolve]
port = 7411
announce = false
cache_capacity = 4096
pending_queries = 64
query_timeout_ms = 500
negative_ttl_ms = 100
answer_ttl_s = 30
heartbeat_ms = 200
heartbeat_timeout_ms = 900
broadcast_rate = 10
broadcast_burst = 5
requester_broadcast_rate = 2
requester_broadcast_burst = 3
peer_verify_rate = 500
peer_verify_burst = 40
sync_interval_ms = 700
max_clock_skew_ms = 5000
announce_window = 16
retransmit_ms = 50
)";
}  // namespace

TEST(Config, ResolveTableParsesEveryValue) {
    const fedgate::Config c = parse_config(kGood + "\n" + kResolve, "test.toml");
    const fedgate::ResolveSettings& r = c.resolve;
    EXPECT_EQ(r.port, 7411);
    EXPECT_FALSE(r.announce);
    EXPECT_EQ(r.cache_capacity, 4096u);
    EXPECT_EQ(r.pending_queries, 64u);
    EXPECT_EQ(r.query_timeout_ms, 500u);
    EXPECT_EQ(r.negative_ttl_ms, 100u);
    EXPECT_EQ(r.answer_ttl_s, 30u);
    EXPECT_EQ(r.heartbeat_ms, 200u);
    EXPECT_EQ(r.heartbeat_timeout_ms, 900u);
    EXPECT_EQ(r.broadcast_rate, 10u);
    EXPECT_EQ(r.broadcast_burst, 5u);
    EXPECT_EQ(r.requester_broadcast_rate, 2u);
    EXPECT_EQ(r.requester_broadcast_burst, 3u);
    EXPECT_EQ(r.peer_verify_rate, 500u);
    EXPECT_EQ(r.peer_verify_burst, 40u);
    EXPECT_EQ(r.sync_interval_ms, 700u);
    EXPECT_EQ(r.max_clock_skew_ms, 5000u);
    EXPECT_EQ(r.announce_window, 16u);
    EXPECT_EQ(r.retransmit_ms, 50u);
}

TEST(Config, ResolveDefaultsWhenTheTableIsAbsent) {
    const fedgate::Config c = parse_config(kGood, "test.toml");
    EXPECT_EQ(c.resolve.port, fedgate::kDefaultResolvePortCfg);
    EXPECT_TRUE(c.resolve.announce);
    EXPECT_EQ(c.resolve.heartbeat_timeout_ms, fedgate::kDefaultHeartbeatTimeoutMs);
}

TEST(ConfigErrors, ResolveAnnounceMustBeABoolean) {
    const std::string text = kGood + "\n" + replaced(kResolve, "announce = false", "announce = \"no\"");
    EXPECT_TRUE(rejects(text, "resolve.announce", "must be true or false", line_of(text, "announce = \"no\"")));
}

TEST(ConfigErrors, ResolveUnknownKeyIsNamed) {
    const std::string text = kGood + "\n" + replaced(kResolve, "answer_ttl_s", "answer_tll_s");
    EXPECT_TRUE(rejects(text, "resolve.answer_tll_s",
                        "unknown key (known here: port, announce, cache_capacity, pending_queries, query_timeout_ms, "
                        "negative_ttl_ms, answer_ttl_s, heartbeat_ms, heartbeat_timeout_ms, broadcast_rate, "
                        "broadcast_burst, requester_broadcast_rate, requester_broadcast_burst, peer_verify_rate, "
                        "peer_verify_burst, sync_interval_ms, max_clock_skew_ms, announce_window, retransmit_ms)",
                        line_of(text, "answer_tll_s")));
}

TEST(ConfigErrors, HeartbeatTimeoutMustExceedTheHeartbeat) {
    const std::string text = kGood + "\n" + replaced(kResolve, "heartbeat_timeout_ms = 900", "heartbeat_timeout_ms = 200");
    EXPECT_TRUE(rejects(text, "resolve.heartbeat_timeout_ms", "must be above heartbeat_ms (200)",
                        line_of(text, "heartbeat_timeout_ms = 200")));
}

TEST(ConfigErrors, ResolvePortInsideTheNatPortRange) {
    const std::string text = kGood + "\n" + replaced(kResolve, "port = 7411", "port = 30000");
    EXPECT_TRUE(rejects(text, "resolve.port",
                        "30000 lies inside nat.port_range 20000-59999, which session ports come from",
                        line_of(text, "port = 30000")));
}

TEST(ConfigErrors, UdpMappingOnTheResolvePortIsRefused) {
    const std::string text = kGood + "\n" + R"([[import]]
cluster = "c1"
proto = "udp"
port = 7410
peer = "beta"
peer_port = 9000
)";
    EXPECT_TRUE(rejects(text, "import[0].port", "udp 7410 is the resolution service's port ([resolve] port)",
                        line_of(text, "port = 7410")));
}

// [connect]: the handshake relay and the tcp transport's automatic mappings.
TEST(Config, ConnectTableParsesEveryValueAndDefaults) {
    const fedgate::Config d = parse_config(kGood, "test.toml");
    EXPECT_EQ(d.connect.auto_port_lo, fedgate::kDefaultAutoPortLo);
    EXPECT_EQ(d.connect.auto_port_hi, fedgate::kDefaultAutoPortHi);
    EXPECT_EQ(d.connect.handshake_timeout_ms, fedgate::kDefaultHandshakeTimeoutMs);
    EXPECT_EQ(d.connect.max_handshakes, fedgate::kDefaultMaxHandshakes);
    const fedgate::Config c = parse_config(
        kGood + "\n[connect]\nauto_ports = \"62000-62009\"\nhandshake_timeout_ms = 2500\nmax_handshakes = 64\n", "test.toml");
    EXPECT_EQ(c.connect.auto_port_lo, 62000);
    EXPECT_EQ(c.connect.auto_port_hi, 62009);
    EXPECT_EQ(c.connect.handshake_timeout_ms, 2500u);
    EXPECT_EQ(c.connect.max_handshakes, 64u);
}

TEST(ConfigErrors, ConnectAutoPortsMustBeARangeOutsideTheNatRange) {
    std::string text = kGood + "\n[connect]\nauto_ports = \"62000\"\n";
    EXPECT_TRUE(rejects(text, "connect.auto_ports", "'62000' must be LO-HI within 1024-65535", line_of(text, "auto_ports")));
    text = kGood + "\n[connect]\nauto_ports = \"59000-60000\"\n";
    EXPECT_TRUE(rejects(text, "connect.auto_ports",
                        "59000-60000 overlaps nat.port_range 20000-59999, which session ports come from",
                        line_of(text, "auto_ports")));
    text = kGood + "\n[connect]\nmax_handshakes = 0\n";
    EXPECT_THROW(parse_config(text, "test.toml"), ConfigError);
}

// [log]: levels by name, fedgate's own types checked at load.
TEST(Config, LogTableIsOptionalAndLeavesLevelsAlone) {
    const fedgate::Config c = parse_config(kGood, "test.toml");
    EXPECT_FALSE(c.log.level);
    EXPECT_TRUE(c.log.types.empty());
}

TEST(Config, LogTableParsesTheLevelAndTypesGlobsFirst) {
    const fedgate::Config c = parse_config(kGood + R"(
[log]
level = "notice"
types = { "fedgate.resolve" = "debug", "lib.eal" = "warning", "pmd.net.*" = "err" }
)", "test.toml");
    EXPECT_EQ(c.log.level, 6u);
    const std::vector<std::pair<std::string, uint32_t>> want{{"pmd.net.*", 4}, {"fedgate.resolve", 8}, {"lib.eal", 5}};
    EXPECT_EQ(c.log.types, want);
    // The same as a sub-table.
    const fedgate::Config d = parse_config(kGood + "\n[log.types]\n\"fedgate.connect\" = \"info\"\n", "test.toml");
    ASSERT_EQ(d.log.types.size(), 1u);
    EXPECT_EQ(d.log.types[0], (std::pair<std::string, uint32_t>{"fedgate.connect", 7}));
}

TEST(ConfigErrors, LogLevelThatIsNotALevelListsTheValidOnes) {
    std::string text = kGood + "\n[log]\nlevel = \"verbose\"\n";
    EXPECT_TRUE(rejects(text, "log.level",
                        "'verbose' is not a log level (emerg, alert, crit, err, warning, notice, info, debug)",
                        line_of(text, "verbose")));
    text = kGood + "\n[log]\ntypes = { \"lib.eal\" = \"loud\" }\n";
    EXPECT_TRUE(rejects(text, "log.types.\"lib.eal\"",
                        "'loud' is not a log level (emerg, alert, crit, err, warning, notice, info, debug)",
                        line_of(text, "loud")));
    text = kGood + "\n[log]\ntypes = { \"lib.eal\" = 7 }\n";
    EXPECT_TRUE(rejects(text, "log.types.\"lib.eal\"",
                        "must be a level string (emerg, alert, crit, err, warning, notice, info, debug)",
                        line_of(text, "lib.eal")));
}

TEST(ConfigErrors, LogTypeThatIsNoFedgateTypeListsThem) {
    const std::string text = kGood + "\n[log.types]\n\"fedgate.resolver\" = \"debug\"\n";
    EXPECT_TRUE(rejects(text, "log.types.\"fedgate.resolver\"",
                        "not a fedgate log type (fedgate.gateway, fedgate.dataplane, fedgate.mgmt, fedgate.resolve, "
                        "fedgate.connect, fedgate.metrics)",
                        line_of(text, "fedgate.resolver")));
}

TEST(ConfigErrors, LogTypesMustBeATableOfNames) {
    std::string text = kGood + "\n[log]\ntypes = \"debug\"\n";
    EXPECT_TRUE(rejects(text, "log.types",
                        "must be a table of log type = \"level\", like { \"fedgate.resolve\" = \"debug\" }",
                        line_of(text, "types =")));
    text = kGood + "\n[log.types]\n\"lib eal\" = \"debug\"\n";
    EXPECT_TRUE(rejects(text, "log.types.\"lib eal\"",
                        "not a log type name or glob (1-64 of letters, digits, '_', '.', '-', '*', '?', '[]')",
                        line_of(text, "lib eal")));
    text = kGood + "\n[log]\nlevels = \"debug\"\n";
    EXPECT_TRUE(rejects(text, "log.levels", "unknown key (known here: level, types)", line_of(text, "levels")));
}

// [metrics]: off unless listen is set.
TEST(Config, MetricsAreOffUnlessListenIsSet) {
    EXPECT_FALSE(parse_config(kGood, "test.toml").metrics.listen);
    EXPECT_FALSE(parse_config(kGood + "\n[metrics]\nlisten = \"\"\n", "test.toml").metrics.listen);
    const fedgate::Config c = parse_config(kGood + "\n[metrics]\nlisten = \"127.0.0.1:9410\"\n", "test.toml");
    ASSERT_TRUE(c.metrics.listen);
    EXPECT_EQ(c.metrics.listen->first, 0x7f000001u);
    EXPECT_EQ(c.metrics.listen->second, 9410);
    EXPECT_EQ(c.metrics.listen_text(), "127.0.0.1:9410");
    EXPECT_TRUE(parse_config(kGood + "\n[metrics]\nlisten = \"0.0.0.0:9100\"\n", "test.toml").metrics.listen);
}

TEST(ConfigErrors, MetricsListenThatIsNotIpPortNamesTheKey) {
    for (const std::string bad : {"9410", "localhost:9410", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1", ":9410"}) {
        const std::string text = kGood + "\n[metrics]\nlisten = \"" + bad + "\"\n";
        EXPECT_TRUE(rejects(text, "metrics.listen",
                            "'" + bad + "' is not IP:PORT, like 127.0.0.1:9410 (an empty string or no key: off)",
                            line_of(text, "listen")))
            << bad;
    }
    std::string text = kGood + "\n[metrics]\nlisten = 9410\n";
    EXPECT_TRUE(rejects(text, "metrics.listen", "must be a string", line_of(text, "listen")));
    text = kGood + "\n[metrics]\nlisten = \"224.0.0.1:9410\"\n";
    EXPECT_TRUE(rejects(text, "metrics.listen", "'224.0.0.1:9410' is not a unicast address (or 0.0.0.0 for every address)",
                        line_of(text, "listen")));
}

TEST(ConfigErrors, MetricsListenOnADataPlaneAddressIsRefused) {
    const std::string text = kGood + "\n[metrics]\nlisten = \"198.18.1.1:9410\"\n";
    EXPECT_TRUE(rejects(text, "metrics.listen",
                        "198.18.1.1 is port 'inside' of the data plane, which the kernel does not see; the endpoint "
                        "is a kernel socket in the gateway's network namespace: use one of its own addresses, such "
                        "as 127.0.0.1",
                        line_of(text, "listen")));
}

// ---- peer keys kept like secrets ----

namespace {

// A private directory with a key file in it, removed with everything in it.
class KeyDir {
public:
    KeyDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "fedgate-keys-XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        dir_ = tmpl;
    }
    ~KeyDir() { std::filesystem::remove_all(dir_); }
    std::string write(const std::string& name, const std::string& text, std::filesystem::perms mode) const {
        const std::string path = dir_ + "/" + name;
        std::ofstream(path) << text;
        std::filesystem::permissions(path, mode);
        return path;
    }
    const std::string& path() const { return dir_; }

private:
    std::string dir_;
};

const std::string kBetaKeyHex = "00112233445566778899aabbccddeeff";
constexpr auto kOwnerOnly = std::filesystem::perms::owner_read | std::filesystem::perms::owner_write;

std::string with_key_line(const std::string& line) {
    return replaced(kGood, "key = \"" + kBetaKeyHex + "\"", line);
}

// The error parsing `text` (as `source`) gives, or "" when it parses.
std::string error_of(const std::string& text, const std::string& source = "test.toml") {
    try {
        parse_config(text, source);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

TEST(ConfigKeys, AKeyFileIsReadAndAnInlineKeyIsWarnedAbout) {
    KeyDir d;
    const std::string path = d.write("beta.key", "  " + kBetaKeyHex + "\n", kOwnerOnly);
    const fedgate::Config from_file = parse_config(with_key_line("key_file = \"" + path + "\""), "test.toml");
    ASSERT_EQ(from_file.peers.size(), 1u);
    EXPECT_EQ(from_file.peers[0].key.size(), 16u);
    EXPECT_EQ(from_file.peers[0].key[15], 0xff);
    EXPECT_EQ(from_file.peers[0].key_file, path);
    EXPECT_TRUE(from_file.warnings.empty());

    const fedgate::Config inline_key = parse_config(kGood, "test.toml");
    EXPECT_EQ(inline_key.peers[0].key, from_file.peers[0].key);
    ASSERT_EQ(inline_key.warnings.size(), 1u);
    EXPECT_NE(inline_key.warnings[0].find("peer[0].key: the key is inline"), std::string::npos) << inline_key.warnings[0];
}

TEST(ConfigKeys, ARelativeKeyFileIsBesideTheConfig) {
    KeyDir d;
    d.write("beta.key", kBetaKeyHex, kOwnerOnly);
    const fedgate::Config c = parse_config(with_key_line("key_file = \"beta.key\""), d.path() + "/fedgate.toml");
    EXPECT_EQ(c.peers[0].key_file, d.path() + "/beta.key");
    EXPECT_EQ(c.peers[0].key.size(), 16u);
}

TEST(ConfigKeys, AKeyFileOpenToGroupOrOthersIsRefusedNamingItsMode) {
    KeyDir d;
    using P = std::filesystem::perms;
    for (const auto& [mode, text] : {std::pair{kOwnerOnly | P::group_read | P::others_read, "0644"},
                                     std::pair{kOwnerOnly | P::group_read, "0640"},
                                     std::pair{kOwnerOnly | P::others_write, "0602"}}) {
        const std::string path = d.write(std::string("k") + text, kBetaKeyHex, mode);
        const std::string err = error_of(with_key_line("key_file = \"" + path + "\""));
        EXPECT_NE(err.find("peer[0].key_file: " + path + " has mode " + text), std::string::npos) << err;
    }
}

TEST(ConfigKeys, AKeyFileNotOwnedByRootIsRefused) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the file away";
    KeyDir d;
    const std::string path = d.write("beta.key", kBetaKeyHex, kOwnerOnly);
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    const std::string err = error_of(with_key_line("key_file = \"" + path + "\""));
    EXPECT_NE(err.find(path + " is owned by uid 65534, not root"), std::string::npos) << err;
}

TEST(ConfigKeys, MissingOrBadKeyFilesAndTwoSourcesAreRefused) {
    KeyDir d;
    std::string err = error_of(with_key_line("key_file = \"" + d.path() + "/none.key\""));
    EXPECT_NE(err.find("key_file: cannot read " + d.path() + "/none.key: No such file or directory"), std::string::npos) << err;
    const std::string shortkey = d.write("short.key", "0011", kOwnerOnly);
    err = error_of(with_key_line("key_file = \"" + shortkey + "\""));
    EXPECT_NE(err.find("key_file: is 2 bytes; at least 16 are needed"), std::string::npos) << err;
    const std::string good = d.write("beta.key", kBetaKeyHex, kOwnerOnly);
    err = error_of(with_key_line("key = \"" + kBetaKeyHex + "\"\nkey_file = \"" + good + "\""));
    EXPECT_NE(err.find("give one of key, key_file and key_credential"), std::string::npos) << err;
    err = error_of(with_key_line(""));
    EXPECT_NE(err.find("key: missing (required): give key_file"), std::string::npos) << err;
}

TEST(ConfigKeys, AKeyIdIsDerivedFromTheKeyUnlessGiven) {
    const fedgate::Config c = parse_config(kGood, "test.toml");
    EXPECT_EQ(c.peers[0].key_id, fedgate::derived_key_id(c.peers[0].key));
    EXPECT_TRUE(c.peers[0].next_key.empty());
    EXPECT_EQ(c.peers[0].next_key_id, 0);
    const fedgate::Config given = parse_config(with_key_line("key = \"" + kBetaKeyHex + "\"\nkey_id = 200"), "test.toml");
    EXPECT_EQ(given.peers[0].key_id, 200);
    std::string err = error_of(with_key_line("key = \"" + kBetaKeyHex + "\"\nkey_id = 0"));
    EXPECT_NE(err.find("peer[0].key_id: 0 is out of range 1..255"), std::string::npos) << err;
    err = error_of(with_key_line("key = \"" + kBetaKeyHex + "\"\nnext_key_id = 3"));
    EXPECT_NE(err.find("peer[0].next_key_id: is given without next_key_file, next_key_credential or next_key"),
              std::string::npos) << err;
}

TEST(ConfigKeys, ANextKeyIsReadBesideTheCurrentOneWithItsOwnId) {
    KeyDir d;
    const std::string next_hex = "ffeeddccbbaa99887766554433221100";
    const std::string path = d.write("beta-next.key", next_hex, kOwnerOnly);
    const fedgate::Config c =
        parse_config(with_key_line("key = \"" + kBetaKeyHex + "\"\nnext_key_file = \"" + path + "\""), "test.toml");
    ASSERT_EQ(c.peers[0].next_key.size(), 16u);
    EXPECT_EQ(c.peers[0].next_key[0], 0xff);
    EXPECT_EQ(c.peers[0].next_key_file, path);
    EXPECT_EQ(c.peers[0].next_key_id, fedgate::derived_key_id(c.peers[0].next_key));
    EXPECT_EQ(c.warnings.size(), 1u) << "only the inline current key is warned about";
    // Inline next key: warned about under its own name.
    const fedgate::Config in =
        parse_config(with_key_line("key_file = \"" + d.write("beta.key", kBetaKeyHex, kOwnerOnly) + "\"\nnext_key = \"" +
                                   next_hex + "\"\nnext_key_id = 9"),
                     "test.toml");
    EXPECT_EQ(in.peers[0].next_key_id, 9);
    ASSERT_EQ(in.warnings.size(), 1u);
    EXPECT_NE(in.warnings[0].find("peer[0].next_key: the key is inline"), std::string::npos) << in.warnings[0];
    // The next key's file is held to the same rules as the current key's.
    const std::string open_path = d.write("open.key", next_hex, kOwnerOnly | std::filesystem::perms::others_read);
    std::string err = error_of(with_key_line("key = \"" + kBetaKeyHex + "\"\nnext_key_file = \"" + open_path + "\""));
    EXPECT_NE(err.find("peer[0].next_key_file: " + open_path + " has mode 0604"), std::string::npos) << err;
}

TEST(ConfigKeys, ANextKeyThatIsTheCurrentKeyOrSharesItsIdIsRefused) {
    std::string err = error_of(with_key_line("key = \"" + kBetaKeyHex + "\"\nnext_key = \"" + kBetaKeyHex + "\""));
    EXPECT_NE(err.find("peer[0].next_key: is the same key as key"), std::string::npos) << err;
    err = error_of(with_key_line("key = \"" + kBetaKeyHex + "\"\nkey_id = 4\nnext_key = \"" +
                                 std::string("ffeeddccbbaa99887766554433221100") + "\"\nnext_key_id = 4"));
    EXPECT_NE(err.find("peer[0].next_key: has key ID 4, the same as key's: set next_key_id"), std::string::npos) << err;
}

TEST(ConfigKeys, ASystemdCredentialIsReadFromItsDirectory) {
    KeyDir d;
    d.write("beta.key", kBetaKeyHex, kOwnerOnly);
    const std::string text = with_key_line("key_credential = \"beta.key\"");
    ::unsetenv("CREDENTIALS_DIRECTORY");
    std::string err = error_of(text);
    EXPECT_NE(err.find("key_credential: $CREDENTIALS_DIRECTORY is not set"), std::string::npos) << err;
    ::setenv("CREDENTIALS_DIRECTORY", d.path().c_str(), 1);
    const fedgate::Config c = parse_config(text, "test.toml");
    EXPECT_EQ(c.peers[0].key_file, d.path() + "/beta.key");
    EXPECT_EQ(c.peers[0].key.size(), 16u);
    err = error_of(with_key_line("key_credential = \"../beta.key\""));
    EXPECT_NE(err.find("must be a credential's name"), std::string::npos) << err;
    ::unsetenv("CREDENTIALS_DIRECTORY");
}

}  // namespace
