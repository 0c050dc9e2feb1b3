// The data plane under a real EAL, on net_ring ports (and one net_pcap port): packets in through a
// ring, one poll, packets out of the other ring, compared byte for byte with what the builder makes.
#include <gtest/gtest.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <chrono>
#include <thread>
#include <filesystem>
#include <functional>

#include "controlplane/counter_table.hpp"
#include "dataplane/dataplane.hpp"
#include "dataplane/peer_auth.hpp"
#include "dataplane/resolve_cache.hpp"
#include "drivers/port.hpp"
#include "tests/support/packet_builder.hpp"
#include "tests/support/pcap_file.hpp"

namespace fedgate {
namespace {

using test::PacketBuilder;
rte_mempool* g_pool = nullptr;

void bring_loopback_up() {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::strcpy(ifr.ifr_name, "lo");
    ASSERT_EQ(::ioctl(fd, SIOCGIFFLAGS, &ifr), 0);
    ifr.ifr_flags |= IFF_UP;
    ASSERT_EQ(::ioctl(fd, SIOCSIFFLAGS, &ifr), 0);
    ::close(fd);
}

class EalEnvironment : public ::testing::Environment {
public:
    void SetUp() override {
        // A network namespace of our own, so the net_tap port's interface never appears on the
        // host; the kernel removes it when the process exits, however it exits.
        ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << "unshare(CLONE_NEWNET): " << std::strerror(errno);
        bring_loopback_up();  // for the net_pcap live-capture case
        const std::string prefix = "fgtest" + std::to_string(::getpid());
        std::vector<std::string> args{"eal_tests", "-l", "0", "--no-huge", "--no-shconf", "-m", "128", "--no-pci",
                                      "--file-prefix", prefix, "--log-level", "lib.eal:error"};
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        ASSERT_GE(rte_eal_init(static_cast<int>(argv.size()), argv.data()), 0) << "EAL init failed";
        g_pool = rte_pktmbuf_pool_create("test_mbufs", 2047, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
        ASSERT_NE(g_pool, nullptr);
    }
    void TearDown() override {
        rte_eal_cleanup();
        std::filesystem::remove_all("/var/run/dpdk/fgtest" + std::to_string(::getpid()));
    }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new EalEnvironment);

test::Mac mac_of(const rte_ether_addr& a) {
    test::Mac m;
    std::memcpy(m.data(), a.addr_bytes, 6);
    return m;
}

uint32_t be(const std::string& s) { return rte_cpu_to_be_32(test::ip(s)); }

// One net_ring port: what the test enqueues on `rx` the port receives; what it sends lands on `tx`.
struct RingPort {
    rte_ring* rx = nullptr;
    rte_ring* tx = nullptr;
    PortHandle handle;
};

class DataplaneTest : public ::testing::Test {
protected:
    static constexpr const char* kInternalIp = "198.18.1.1";
    static constexpr const char* kExternalIp = "198.19.0.1";
    const test::Mac kNode{0x02, 0x00, 0x00, 0x00, 0x01, 0x0a};
    const test::Mac kPeerGw{0x02, 0x00, 0x00, 0x00, 0x02, 0x01};

    void SetUp() override { make(DataplaneConfig{}); }

    void make(const DataplaneConfig& cfg, ControlWake* wake = nullptr, DpShared shared = {}) {
        teardown();
        static int seq = 0;
        for (int i = 0; i < 2; ++i) {
            const std::string n = "t" + std::to_string(seq++);
            ports_[i].rx = rte_ring_create((n + "rx").c_str(), 256, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
            ports_[i].tx = rte_ring_create((n + "tx").c_str(), 256, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
            ASSERT_NE(ports_[i].rx, nullptr);
            ASSERT_GE(rte_eth_from_rings(n.c_str(), &ports_[i].rx, 1, &ports_[i].tx, 1, 0), 0);
            // The same bring-up path the daemon uses, finding the port by its name (the PMD prefixes "net_ring_").
            ports_[i].handle = bring_up_port(PortSetup{n, "net_ring_" + n}, g_pool);
        }
        std::vector<DpPortConfig> pc(2);
        pc[0] = {ports_[0].handle.port_id, PortRole::internal, ports_[0].handle.mac, be(kInternalIp), 24, 0, {}};
        pc[1] = {ports_[1].handle.port_id, PortRole::external, ports_[1].handle.mac, be(kExternalIp), 24, be("198.19.0.254"), {}};
        punt_ = rte_ring_create(("punt" + std::to_string(seq)).c_str(), 64, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
        inject_ = rte_ring_create(("inj" + std::to_string(seq)).c_str(), 64, 0, RING_F_SC_DEQ);
        dp_ = std::make_unique<Dataplane>(cfg, pc, g_pool, DpRings{punt_, inject_, nullptr, nullptr, wake}, shared);
        gw_in_ = mac_of(ports_[0].handle.mac);
        gw_ext_ = mac_of(ports_[1].handle.mac);
    }

    void TearDown() override { teardown(); }

    void teardown() {
        dp_.reset();
        for (auto& p : ports_) {
            if (p.rx == nullptr) continue;
            close_port(p.handle);
            drain(p.tx);
            drain(p.rx);
            rte_ring_free(p.rx);
            rte_ring_free(p.tx);
            p = RingPort{};
        }
        for (rte_ring* r : {punt_, inject_}) {
            drain(r);
            rte_ring_free(r);
        }
        punt_ = inject_ = nullptr;
    }

    static void drain(rte_ring* r) {
        void* m;
        while (r != nullptr && rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    }

    static rte_mbuf* mbuf_of(const std::vector<uint8_t>& bytes) {
        rte_mbuf* m = rte_pktmbuf_alloc(g_pool);
        std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(bytes.size())), bytes.data(), bytes.size());
        return m;
    }

    // `ol_flags`: what the receiving device would have said (RX checksum offload verdicts).
    void receive(int port, const std::vector<uint8_t>& frame, uint64_t ol_flags = 0) {
        rte_mbuf* m = mbuf_of(frame);
        m->ol_flags |= ol_flags;
        ASSERT_EQ(rte_ring_enqueue(ports_[port].rx, m), 0);
    }

    void inject(const std::vector<uint8_t>& frame) {  // strips the builder's Ethernet header
        rte_mbuf* m = mbuf_of(frame);
        rte_pktmbuf_adj(m, 14);
        ASSERT_EQ(rte_ring_enqueue(inject_, m), 0);
    }

    // Everything the port has sent, as mbufs (the caller frees them).
    std::vector<rte_mbuf*> sent_mbufs(int port) {
        std::vector<rte_mbuf*> out;
        void* p;
        while (rte_ring_dequeue(ports_[port].tx, &p) == 0) out.push_back(static_cast<rte_mbuf*>(p));
        return out;
    }

    // Everything the port has sent, as byte vectors.
    std::vector<std::vector<uint8_t>> sent(int port) {
        std::vector<std::vector<uint8_t>> out;
        void* p;
        while (rte_ring_dequeue(ports_[port].tx, &p) == 0) {
            auto* m = static_cast<rte_mbuf*>(p);
            const auto* d = rte_pktmbuf_mtod(m, const uint8_t*);
            out.emplace_back(d, d + rte_pktmbuf_data_len(m));
            rte_pktmbuf_free(m);
        }
        return out;
    }

    uint64_t drops(int port, DropReason r) const {
        return dp_->port_counters(port).drops[static_cast<std::size_t>(r)].get();
    }

    RingPort ports_[2];
    rte_ring* punt_ = nullptr;
    rte_ring* inject_ = nullptr;
    std::unique_ptr<Dataplane> dp_;
    test::Mac gw_in_{}, gw_ext_{};
};

TEST_F(DataplaneTest, ArpRequestForThePortAddressGetsTheExactReply) {
    receive(0, PacketBuilder().eth(test::kBroadcast, kNode).arp(1, kNode, "198.18.1.10", {}, kInternalIp).build());
    EXPECT_EQ(dp_->poll_once(), 1u);
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], PacketBuilder().eth(kNode, gw_in_).arp(2, gw_in_, kInternalIp, kNode, "198.18.1.10").build());
    EXPECT_EQ(dp_->counters().arp_replies_sent.get(), 1u);
    EXPECT_EQ(dp_->port_counters(0).tx_packets.get(), 1u);
    EXPECT_EQ(dp_->port_counters(0).rx_packets.get(), 1u);
    EXPECT_TRUE(sent(1).empty());
}

// A standby member of a gateway group learns neighbours from ARP (warm for a takeover) and takes
// nothing else, not even ARP to answer (the active member owns the addresses): each packet counted
// in and counted as a drop. From the poll after it becomes active it announces itself and answers;
// the node's MAC it learnt while standing by takes the answer out without asking for it.
TEST_F(DataplaneTest, AStandbyLearnsFromArpAndDropsEverythingCountedUntilItBecomesActive) {
    std::atomic<bool> standby{true};
    DpShared shared;
    shared.standby = &standby;
    make(DataplaneConfig{}, nullptr, shared);
    const auto arp = PacketBuilder().eth(test::kBroadcast, kNode).arp(1, kNode, "198.18.1.10", {}, kInternalIp).build();
    const auto echo = PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp, 61, 5).icmp(8, 0, 7, 1).payload(56).build();
    receive(0, echo);
    receive(0, arp);
    receive(0, echo);
    EXPECT_EQ(dp_->poll_once(), 3u);
    EXPECT_TRUE(sent(0).empty());
    EXPECT_TRUE(sent(1).empty());
    EXPECT_EQ(drops(0, DropReason::cluster_standby), 3u);
    EXPECT_EQ(dp_->port_counters(0).rx_packets.get(), 3u);
    EXPECT_EQ(dp_->port_counters(0).rx_bytes.get(), 2 * echo.size() + arp.size());
    EXPECT_EQ(dp_->counters().arp_requests_received.get(), 1u);

    standby.store(false);
    receive(0, echo);
    dp_->poll_once();
    const auto out = sent(0);
    const auto reply = PacketBuilder().eth(kNode, gw_in_).ipv4(kInternalIp, "198.18.1.10", 64, 5).icmp(0, 0, 7, 1).payload(56).build();
    ASSERT_EQ(out.size(), 2u) << "a gratuitous ARP and the echo reply";
    EXPECT_EQ(out[0][12] << 8 | out[0][13], 0x0806);
    EXPECT_EQ(out[1], reply);
    EXPECT_EQ(dp_->counters().echo_replies_sent.get(), 1u);
    EXPECT_EQ(dp_->counters().arp_gratuitous_sent.get(), 2u);
    EXPECT_EQ(drops(0, DropReason::cluster_standby), 3u);
    EXPECT_EQ(dp_->port_counters(0).rx_packets.get(), 4u);
}

TEST_F(DataplaneTest, ArpForAnotherAddressIsCountedNotAnswered) {
    receive(0, PacketBuilder().eth(test::kBroadcast, kNode).arp(1, kNode, "198.18.1.10", {}, "198.18.1.99").build());
    dp_->poll_once();
    EXPECT_TRUE(sent(0).empty());
    EXPECT_EQ(drops(0, DropReason::arp_not_for_us), 1u);
}

TEST_F(DataplaneTest, EchoRequestGetsAReplyWithCorrectChecksums) {
    receive(0, PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp, 61, 777).icmp(8, 0, 0x1234, 9).payload(56).build());
    dp_->poll_once();
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    // The builder computes the checksums on its own; equal bytes means the data plane's are right.
    EXPECT_EQ(out[0], PacketBuilder().eth(kNode, gw_in_).ipv4(kInternalIp, "198.18.1.10", 64, 777).icmp(0, 0, 0x1234, 9).payload(56).build());
    EXPECT_EQ(test::inet_checksum(&out[0][14], 20), 0);
    EXPECT_EQ(test::inet_checksum(&out[0][34], out[0].size() - 34), 0);
    EXPECT_EQ(dp_->counters().echo_replies_sent.get(), 1u);
}

TEST_F(DataplaneTest, EchoWithEthernetPaddingGetsAReplyWithoutThePadding) {
    auto frame = PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp).icmp(8, 0, 1, 1).payload(4).build();
    const std::size_t ip_end = frame.size();
    frame.resize(60, 0xee);
    receive(0, frame);
    dp_->poll_once();
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].size(), ip_end);
}

TEST_F(DataplaneTest, NodeCanPingTheExternalAddressThroughTheInternalPort) {
    receive(0, PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kExternalIp).icmp(8, 0, 5, 1).payload(8).build());
    dp_->poll_once();
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], PacketBuilder().eth(kNode, gw_in_).ipv4(kExternalIp, "198.18.1.10", 64).icmp(0, 0, 5, 1).payload(8).build());
}

struct BadCase {
    const char* name;
    std::vector<uint8_t> frame;
    DropReason reason;
};

TEST_F(DataplaneTest, GarbageIsDroppedAndCountedWithItsReason) {
    const test::Mac other{0x02, 0, 0, 0, 9, 9};
    auto bad_csum = PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp).icmp(8, 0, 1, 1).build();
    bad_csum[24] ^= 0xff;
    auto bad_icmp = PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp).icmp(8, 0, 1, 1).build();
    bad_icmp[36] ^= 0xff;
    auto ipv6 = PacketBuilder().eth(gw_in_, kNode).payload(40).build();
    ipv6[12] = 0x86, ipv6[13] = 0xdd;
    const std::vector<BadCase> cases = {
        {"runt", {1, 2, 3, 4, 5}, DropReason::eth_truncated},
        {"other MAC", PacketBuilder().eth(other, kNode).ipv4("198.18.1.10", kInternalIp).icmp(8, 0, 1, 1).build(), DropReason::l2_not_for_us},
        {"broadcast source MAC", PacketBuilder().eth(gw_in_, test::kBroadcast).ipv4("198.18.1.10", kInternalIp).icmp(8, 0, 1, 1).build(), DropReason::l2_bad_source},
        {"subnet broadcast source", PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.255", kInternalIp).icmp(8, 0, 1, 1).build(), DropReason::ipv4_bad_source},
        {"vlan", PacketBuilder().eth(gw_in_, kNode).vlan(3).ipv4("198.18.1.10", kInternalIp).icmp(8, 0, 1, 1).build(), DropReason::vlan_unsupported},
        {"ipv6", ipv6, DropReason::ethertype_unsupported},
        {"ip checksum", bad_csum, DropReason::ipv4_bad_checksum},
        {"icmp checksum", bad_icmp, DropReason::icmp_bad_checksum},
        {"udp to us", PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp).udp(5, 6).build(), DropReason::l4_unhandled},
        {"gre to us", PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp).payload(8).ip_proto(47).build(), DropReason::ipv4_proto_unhandled},
        {"transit", PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", "198.18.2.10").udp(5, 6).build(), DropReason::ipv4_not_for_us},
        {"fragment", PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp).fragment(true, 0).icmp(8, 0, 1, 1).build(), DropReason::ipv4_fragment},
        {"spoofed source", PacketBuilder().eth(gw_in_, kNode).ipv4(kExternalIp, kInternalIp).icmp(8, 0, 1, 1).build(), DropReason::ipv4_bad_source},
        // Of the fast path's shape: owns_address()'s filter must let both of our addresses through to the compare.
        {"spoofed source, udp", PacketBuilder().eth(gw_in_, kNode).ipv4(kExternalIp, kInternalIp).udp(5, 6).build(), DropReason::ipv4_bad_source},
        {"our own source, tcp", PacketBuilder().eth(gw_in_, kNode).ipv4(kInternalIp, kInternalIp).tcp(5, 6, 0x10).build(), DropReason::ipv4_bad_source},
        {"timestamp request", PacketBuilder().eth(gw_in_, kNode).ipv4("198.18.1.10", kInternalIp).icmp(13, 0, 1, 1).build(), DropReason::icmp_unhandled},
        {"arp bad sender", PacketBuilder().eth(test::kBroadcast, kNode).arp(1, kNode, "198.18.9.9", {}, kInternalIp).build(), DropReason::arp_bad_sender},
    };
    for (const BadCase& c : cases) {
        const uint64_t before = drops(0, c.reason);
        receive(0, c.frame);
        dp_->poll_once();
        EXPECT_EQ(drops(0, c.reason), before + 1) << c.name;
        EXPECT_TRUE(sent(0).empty()) << c.name;
    }
    EXPECT_EQ(dp_->port_counters(0).total_drops(), cases.size());
    EXPECT_EQ(dp_->port_counters(0).rx_packets.get(), cases.size());
}

TEST_F(DataplaneTest, AMappingToATargetRepliesCouldNotComeFromOpensNoSession) {
    // The established-flow path leaves a session's sources unchecked: the session vouches for them
    // (Nat::set_source_check). So a session must not open toward a node whose replies the full
    // path would drop as ipv4_bad_source: here the internal subnet's broadcast address.
    PortMapView maps;
    ExportRule rule;
    rule.node_addr = be("198.18.1.255");
    rule.node_port = htons(80);
    rule.n_peers = 1;
    rule.peer_addrs[0] = be("198.19.0.2");
    maps.publish(L4Proto::tcp, htons(7000), &rule);
    make(DataplaneConfig{}, nullptr, DpShared{&maps});
    const auto syn = [&](uint16_t sport) {
        return PacketBuilder().eth(gw_ext_, kPeerGw).ipv4("198.19.0.2", kExternalIp).tcp(sport, 7000, 0x02).build();
    };
    receive(1, syn(45000));
    dp_->poll_once();
    EXPECT_EQ(drops(1, DropReason::map_bad_target), 1u);
    EXPECT_EQ(dp_->nat_counters().sessions_created.get(), 0u);
    EXPECT_TRUE(sent(0).empty());
    EXPECT_TRUE(sent(1).empty());
    // Toward an ordinary node the same mapping opens one (its SYN waits for the node's ARP answer).
    ExportRule node = rule;
    node.node_addr = be("198.18.1.20");
    maps.publish(L4Proto::tcp, htons(7000), &node);
    receive(1, syn(45001));
    dp_->poll_once();
    EXPECT_EQ(dp_->nat_counters().sessions_created.get(), 1u);
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], PacketBuilder().eth(test::kBroadcast, gw_in_).arp(1, gw_in_, kInternalIp, {}, "198.18.1.20").build());
    EXPECT_EQ(drops(1, DropReason::map_bad_target), 1u);
    dp_.reset();  // before the maps it reads
}

TEST_F(DataplaneTest, InjectedPacketWaitsForArpThenLeavesWithTheLearnedMac) {
    const auto pkt = PacketBuilder().eth({}, {}).ipv4(kInternalIp, "198.18.1.50").icmp(8, 0, 1, 1).payload(8).build();
    inject(pkt);
    dp_->poll_once();
    auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], PacketBuilder().eth(test::kBroadcast, gw_in_).arp(1, gw_in_, kInternalIp, {}, "198.18.1.50").build());

    const test::Mac node50{0x02, 0, 0, 0, 1, 0x50};
    receive(0, PacketBuilder().eth(gw_in_, node50).arp(2, node50, "198.18.1.50", gw_in_, kInternalIp).build());
    dp_->poll_once();
    out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], PacketBuilder().eth(node50, gw_in_).ipv4(kInternalIp, "198.18.1.50").icmp(8, 0, 1, 1).payload(8).build());

    inject(pkt);  // now resolved: straight out, no ARP
    dp_->poll_once();
    out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(test::get16(out[0], 12), 0x0800);
    EXPECT_EQ(dp_->counters().arp_requests_sent.get(), 1u);
    // The gauge is published when a pass of the timers ends (a slice per busy poll): poll until then.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (dp_->neighbour_entries(0) != 1u && std::chrono::steady_clock::now() < deadline) dp_->poll_once();
    EXPECT_EQ(dp_->neighbour_entries(0), 1u);
}

TEST_F(DataplaneTest, AnOffSubnetSourceEndingIn255IsNotABroadcast) {
    // 198.18.7.255 is an ordinary host of another subnet (say a /16 behind the next hop).
    receive(1, PacketBuilder().eth(gw_ext_, kPeerGw).ipv4("198.18.7.255", kExternalIp).icmp(8, 0, 3, 1).build());
    dp_->poll_once();
    EXPECT_EQ(sent(1).size(), 1u);
    EXPECT_EQ(drops(1, DropReason::ipv4_bad_source), 0u);
}

TEST_F(DataplaneTest, OffSubnetDestinationGoesToTheNextHop) {
    inject(PacketBuilder().eth({}, {}).ipv4(kExternalIp, "198.19.200.1").icmp(8, 0, 1, 1).build());
    dp_->poll_once();
    const auto out = sent(1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], PacketBuilder().eth(test::kBroadcast, gw_ext_).arp(1, gw_ext_, kExternalIp, {}, "198.19.0.254").build());
}

TEST_F(DataplaneTest, AStaticNeighbourIsUsedWithoutArp) {
    const test::Mac hop{0x02, 0, 0, 0, 0x0e, 0x01};
    teardown();
    SetUp();
    // Rebuild with a static entry for the next hop on the external port.
    std::vector<DpPortConfig> pc(2);
    pc[0] = {ports_[0].handle.port_id, PortRole::internal, ports_[0].handle.mac, be(kInternalIp), 24, 0, {}};
    MacAddr m;
    std::memcpy(m.data(), hop.data(), 6);
    pc[1] = {ports_[1].handle.port_id, PortRole::external, ports_[1].handle.mac, be(kExternalIp), 24, be("198.19.0.254"),
             {{be("198.19.0.254"), m}}};
    dp_ = std::make_unique<Dataplane>(DataplaneConfig{}, pc, g_pool, DpRings{punt_, inject_});
    inject(PacketBuilder().eth({}, {}).ipv4(kExternalIp, "198.19.200.1").icmp(8, 0, 1, 1).build());
    dp_->poll_once();
    const auto out = sent(1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], PacketBuilder().eth(hop, gw_ext_).ipv4(kExternalIp, "198.19.200.1").icmp(8, 0, 1, 1).build());
    // An ARP reply claiming another MAC for it does not change a configured entry.
    const test::Mac liar{0x02, 0, 0, 0, 0x0e, 0x99};
    receive(1, PacketBuilder().eth(gw_ext_, liar).arp(2, liar, "198.19.0.254", gw_ext_, kExternalIp).build());
    inject(PacketBuilder().eth({}, {}).ipv4(kExternalIp, "198.19.200.1").icmp(8, 0, 1, 2).build());
    dp_->poll_once();
    const auto again = sent(1);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(std::vector<uint8_t>(again[0].begin(), again[0].begin() + 6), std::vector<uint8_t>(hop.begin(), hop.end()));
    EXPECT_EQ(dp_->counters().arp_requests_sent.get(), 0u);
}

TEST_F(DataplaneTest, UnansweredArpDropsTheHeldPacketAfterTheProbes) {
    DataplaneConfig cfg;
    cfg.neighbour.probe_interval_ms = 10;
    cfg.neighbour.probes = 2;
    make(cfg);
    inject(PacketBuilder().eth({}, {}).ipv4(kInternalIp, "198.18.1.77").icmp(8, 0, 1, 1).build());
    inject(PacketBuilder().eth({}, {}).ipv4(kInternalIp, "198.18.1.77").icmp(8, 0, 1, 2).build());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (dp_->counters().neigh_failed.get() == 0 && std::chrono::steady_clock::now() < deadline) dp_->poll_once();
    EXPECT_EQ(dp_->counters().neigh_failed.get(), 1u);
    // One waited in the hold slot and expired; the second found the slot taken.
    EXPECT_EQ(drops(0, DropReason::neighbour_unresolved), 2u);
    EXPECT_EQ(dp_->counters().arp_requests_sent.get(), 2u);
    for (const auto& f : sent(0)) EXPECT_EQ(test::get16(f, 12), 0x0806) << "only ARP probes may leave";
}

TEST_F(DataplaneTest, EchoReplyToUsIsPuntedToTheControlThreads) {
    receive(1, PacketBuilder().eth(gw_ext_, kPeerGw).ipv4("198.19.0.2", kExternalIp).icmp(0, 0, 0xf001, 1).payload(8).build());
    dp_->poll_once();
    rte_mbuf* m = nullptr;
    ASSERT_EQ(rte_ring_dequeue(punt_, reinterpret_cast<void**>(&m)), 0);
    EXPECT_EQ(rte_pktmbuf_data_len(m), 14u + 20 + 8 + 8);
    rte_pktmbuf_free(m);
    EXPECT_EQ(dp_->counters().punted.get(), 1u);
}

// The punt thread's doorbell, as the gateway makes it: an eventfd, and the flag it raises to sleep.
struct Doorbell {
    ControlWake wake;
    Doorbell() { wake.fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
    ~Doorbell() { ::close(wake.fd); }
    // What the lcore wrote since the last look (0: nothing; the eventfd adds the writes up).
    uint64_t take() const {
        uint64_t n = 0;
        return ::read(wake.fd, &n, sizeof n) == sizeof n ? n : 0;
    }
    bool readable() const {
        pollfd p{wake.fd, POLLIN, 0};
        return ::poll(&p, 1, 0) == 1;
    }
};

TEST_F(DataplaneTest, APuntRingsTheDoorbellOnlyWhenTheControlThreadSleepsAndOncePerSleep) {
    Doorbell bell;
    ASSERT_GE(bell.wake.fd, 0);
    make(DataplaneConfig{}, &bell.wake);
    const auto echo_reply = [&](uint16_t seq) {
        return PacketBuilder().eth(gw_ext_, kPeerGw).ipv4("198.19.0.2", kExternalIp).icmp(0, 0, 0xf001, seq).payload(8).build();
    };
    const auto punted = [&] {
        std::size_t n = 0;
        for (void* m; rte_ring_dequeue(punt_, &m) == 0; ++n) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
        return n;
    };

    // Awake: the packet is punted, and no syscall is made.
    receive(1, echo_reply(1));
    dp_->poll_once();
    EXPECT_EQ(punted(), 1u);
    EXPECT_FALSE(bell.readable());
    EXPECT_EQ(dp_->counters().control_wakeups.get(), 0u);

    // Asleep, nothing punted (an echo request the lcore answers itself): no write, the flag stays.
    bell.wake.sleeping.store(true);
    receive(1, PacketBuilder().eth(gw_ext_, kPeerGw).ipv4("198.19.0.2", kExternalIp).icmp(8, 0, 0xf001, 2).payload(8).build());
    dp_->poll_once();
    EXPECT_EQ(sent(1).size(), 1u);
    EXPECT_FALSE(bell.readable());
    EXPECT_TRUE(bell.wake.sleeping.load());

    // Asleep, two punts in one poll: one write, and the lcore takes the flag.
    receive(1, echo_reply(3));
    receive(1, echo_reply(4));
    dp_->poll_once();
    EXPECT_EQ(punted(), 2u);
    EXPECT_EQ(bell.take(), 1u);
    EXPECT_FALSE(bell.wake.sleeping.load());
    EXPECT_EQ(dp_->counters().control_wakeups.get(), 1u);

    // Still the same sleep (the control thread has not raised the flag again): no second write.
    receive(1, echo_reply(5));
    dp_->poll_once();
    EXPECT_EQ(punted(), 1u);
    EXPECT_FALSE(bell.readable());
    EXPECT_EQ(dp_->counters().control_wakeups.get(), 1u);

    // The next sleep is woken again.
    bell.wake.sleeping.store(true);
    receive(1, echo_reply(6));
    dp_->poll_once();
    EXPECT_EQ(bell.take(), 1u);
    EXPECT_EQ(dp_->counters().control_wakeups.get(), 2u);
    EXPECT_EQ(dp_->counters().punted.get(), 5u);
}

TEST_F(DataplaneTest, MalformedInjectedPacketIsDroppedNotSent) {
    auto bad = PacketBuilder().eth({}, {}).ipv4(kInternalIp, "198.18.1.50").icmp(8, 0, 1, 1).build();
    bad[14 + 10] ^= 0x55;  // IPv4 checksum
    inject(bad);
    dp_->poll_once();
    EXPECT_TRUE(sent(0).empty());
    EXPECT_EQ(drops(0, DropReason::inject_malformed), 1u);
}

// A pcap file in, a pcap file out: the net_pcap vdev comes up through rte_dev_probe like any other.
// Two data planes, each on its own pair of net_ring ports as two workers with their own queues
// are: the counter table adds them up exactly, takes "once" rows from the first, and the stats JSON
// it writes holds the sums.
TEST_F(DataplaneTest, TwoWorkersAreSummedExactlyByTheCounterTable) {
    RingPort second[2];
    for (int i = 0; i < 2; ++i) {
        const std::string n = "w2p" + std::to_string(i);
        second[i].rx = rte_ring_create((n + "rx").c_str(), 256, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
        second[i].tx = rte_ring_create((n + "tx").c_str(), 256, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
        ASSERT_NE(second[i].rx, nullptr);
        ASSERT_GE(rte_eth_from_rings(n.c_str(), &second[i].rx, 1, &second[i].tx, 1, 0), 0);
        second[i].handle = bring_up_port(PortSetup{n, "net_ring_" + n}, g_pool);
    }
    std::vector<DpPortConfig> pc(2);
    pc[0] = {second[0].handle.port_id, PortRole::internal, second[0].handle.mac, be(kInternalIp), 24, 0, {}};
    pc[1] = {second[1].handle.port_id, PortRole::external, second[1].handle.mac, be(kExternalIp), 24, be("198.19.0.254"), {}};
    auto b = std::make_unique<Dataplane>(DataplaneConfig{}, pc, g_pool, DpRings{});
    const auto arp = [&](int n) {
        return PacketBuilder().eth(test::kBroadcast, kNode).arp(1, kNode, ("198.18.1." + std::to_string(10 + n)).c_str(), {}, kInternalIp).build();
    };

    // Worker a: two ARP requests and a runt on the internal port, an echo request on the external one.
    receive(0, arp(0));
    receive(0, arp(1));
    receive(0, {1, 2, 3, 4, 5});
    receive(1, PacketBuilder().eth(gw_ext_, kPeerGw).ipv4("198.19.0.2", kExternalIp).icmp(8, 0, 1, 1).payload(8).build());
    EXPECT_EQ(dp_->poll_once(), 4u);
    // Worker b: three ARP requests inside, two runts outside.
    for (int i = 2; i < 5; ++i) EXPECT_EQ(rte_ring_enqueue(second[0].rx, mbuf_of(arp(i))), 0);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(rte_ring_enqueue(second[1].rx, mbuf_of({1, 2, 3, 4, 5})), 0);
    EXPECT_EQ(b->poll_once(), 5u);

    const std::vector<const Dataplane*> workers{dp_.get(), b.get()};
    const CounterSnapshot sum = sum_workers(workers);
    nlohmann::ordered_json j = {{"ports", nlohmann::ordered_json::array({{{"name", "in"}}, {{"name", "out"}}})}};
    write_counters(j, Reply::stats, sum, GatewayReadings{});
    EXPECT_EQ(j["ports"][0]["rx_packets"], 6);
    EXPECT_EQ(j["ports"][0]["tx_packets"], 5);
    EXPECT_EQ(j["ports"][1]["rx_packets"], 3);
    EXPECT_EQ(j["ports"][1]["tx_packets"], 1);
    EXPECT_EQ(j["ports"][0]["drops"], 1);
    EXPECT_EQ(j["ports"][1]["drops"], 2);
    EXPECT_EQ(j["ports"][0]["drops_by_reason"], nlohmann::ordered_json({{"eth_truncated", 1}}));  // non-zero only
    EXPECT_EQ(j["ports"][1]["drops_by_reason"], nlohmann::ordered_json({{"eth_truncated", 2}}));
    EXPECT_EQ(j["drops_by_reason"]["eth_truncated"], 3);
    EXPECT_EQ(j["drops_by_reason"]["no_route"], 0);
    EXPECT_EQ(j["arp"]["requests_received"], 5);
    EXPECT_EQ(j["arp"]["replies_sent"], 5);
    EXPECT_EQ(j["icmp"]["echo_requests_received"], 1);
    EXPECT_EQ(j["icmp"]["echo_replies_sent"], 1);
    EXPECT_EQ(j["loop"]["polls"], dp_->counters().polls.get() + b->counters().polls.get());
    EXPECT_GE(j["loop"]["polls"].get<uint64_t>(), 2u);
    EXPECT_EQ(j["neighbour"]["learned"], dp_->counters().neigh_learned.get() + b->counters().neigh_learned.get());
    // Pools are slices of one range per worker: used and free add up.
    EXPECT_EQ(j["nat"]["port_pools"]["external_tcp"]["free"],
              dp_->pool_free(Nat::Pool::external, L4Proto::tcp) + b->pool_free(Nat::Pool::external, L4Proto::tcp));
    // Taken once: the first worker's neighbour table stands for all.
    EXPECT_EQ(j["neighbour"]["entries"], dp_->neighbour_entries());
    EXPECT_FALSE(j.contains("resolution"));  // no worker runs the resolver
    // One worker alone is itself.
    const std::vector<const Dataplane*> only_b{b.get()};
    nlohmann::ordered_json jb = {{"ports", nlohmann::ordered_json::array({{{"name", "in"}}, {{"name", "out"}}})}};
    write_counters(jb, Reply::stats, sum_workers(only_b), GatewayReadings{});
    EXPECT_EQ(jb["ports"][0]["rx_packets"], 3);
    EXPECT_EQ(jb["arp"]["requests_received"], 3);

    b.reset();
    for (auto& p : second) {
        close_port(p.handle);
        drain(p.tx);
        drain(p.rx);
        rte_ring_free(p.rx);
        rte_ring_free(p.tx);
    }
}

TEST(DataplanePcap, ArpRequestFromAPcapFileIsAnsweredIntoAPcapFile) {
    const auto dir = std::filesystem::temp_directory_path() / ("fgpcap" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const test::Mac node{0x02, 0, 0, 0, 1, 0x0a};
    test::write_pcap(dir / "in.pcap", {PacketBuilder().eth(test::kBroadcast, node).arp(1, node, "198.18.1.10", {}, "198.18.1.1").build()});
    const std::string dev = "net_pcap_t0,rx_pcap=" + (dir / "in.pcap").string() + ",tx_pcap=" + (dir / "out.pcap").string();
    PortHandle h = bring_up_port(PortSetup{"pcap", dev}, g_pool);
    {
        std::vector<DpPortConfig> pc{{h.port_id, PortRole::internal, h.mac, be("198.18.1.1"), 24, 0, {}}};
        Dataplane dp(DataplaneConfig{}, pc, g_pool, DpRings{});
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (dp.counters().arp_replies_sent.get() == 0 && std::chrono::steady_clock::now() < deadline) dp.poll_once();
        EXPECT_EQ(dp.port_counters(0).tx_packets.get(), 1u);
    }
    close_port(h);  // flushes and closes the output file
    const auto out = test::read_pcap(dir / "out.pcap");
    ASSERT_EQ(out.size(), 1u);
    const test::Mac gw = mac_of(h.mac);
    EXPECT_EQ(out[0], PacketBuilder().eth(node, gw).arp(2, gw, "198.18.1.1", node, "198.18.1.10").build());
    std::filesystem::remove_all(dir);
}

// Every kind of vdev comes up, reports a MAC and link, and goes away again through the same path.
struct VdevCase {
    const char* devargs;
    const char* driver;
};
class PortBringUpVdev : public ::testing::TestWithParam<VdevCase> {};

TEST_P(PortBringUpVdev, ComesUpWithAMacAndIsDetachedOnClose) {
    const PortHandle h = bring_up_port(PortSetup{"p", GetParam().devargs}, g_pool);
    EXPECT_TRUE(h.attached_here);
    EXPECT_EQ(h.driver, GetParam().driver);
    EXPECT_FALSE(rte_is_zero_ether_addr(&h.mac));
    EXPECT_TRUE(rte_eth_dev_is_valid_port(h.port_id));
    link_state(h.port_id);  // must answer for every driver, whatever it says
    close_port(h);
    EXPECT_FALSE(rte_eth_dev_is_valid_port(h.port_id)) << "the port should be gone after close";
}

INSTANTIATE_TEST_SUITE_P(AllVdevKinds, PortBringUpVdev,
                         ::testing::Values(VdevCase{"net_null_b0,no-rx=1", "net_null"},
                                           VdevCase{"net_ring_b0", "net_ring"},
                                           VdevCase{"net_tap_b0,iface=fgtapb0", "net_tap"},
                                           VdevCase{"net_pcap_b0,iface=lo", "net_pcap"}),
                         [](const auto& info) { return std::string(info.param.driver); });

// Checksum offloads are turned on where the device has them (net_tap fills in checksums in its
// driver; its receive check is left off, see bring_up_port) and stay off where it has none.
TEST(PortBringUp, ChecksumOffloadsAreOnWhereTheDeviceHasThem) {
    const PortHandle tap = bring_up_port(PortSetup{"p", "net_tap_c0,iface=fgtapc0"}, g_pool);
    EXPECT_FALSE(tap.rx_cksum);
    EXPECT_TRUE(tap.tx_cksum);
    close_port(tap);
    const PortHandle ring = bring_up_port(PortSetup{"p", "net_ring_c0"}, g_pool);
    EXPECT_FALSE(ring.rx_cksum);
    EXPECT_FALSE(ring.tx_cksum);
    close_port(ring);
}

TEST(PortBringUp, UnknownDeviceIsRefusedWithTheDeviceNamed) {
    try {
        bring_up_port(PortSetup{"bogus", "net_nosuchdriver0,x=1"}, g_pool);
        FAIL() << "expected PortError";
    } catch (const PortError& e) {
        EXPECT_NE(std::string(e.what()).find("net_nosuchdriver0,x=1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("port 'bogus'"), std::string::npos) << e.what();
    }
}

// ---- the resolution service on the lcore -------------------------------------------------------

// The data plane with the resolution service on: gateway party 1, one peer (party 2, 198.19.0.2),
// static neighbours for the node and the peer so replies leave without ARP.
class ResolveDataplaneTest : public DataplaneTest {
protected:
    static constexpr const char* kNodeIp = "198.18.1.10";
    static constexpr const char* kPeerIp = "198.19.0.2";
    static constexpr uint16_t kPort = 7410;
    const std::vector<uint8_t> kKey = std::vector<uint8_t>(32, 0x5a);
    static constexpr uint8_t kKeyId = 7;
    PeerKeys keys(const std::vector<uint8_t>& bytes) const { return PeerKeys({bytes, kKeyId}); }

    void SetUp() override {
        DataplaneTest::SetUp();
        events_ = rte_ring_create_elem("resolve_events", sizeof(ResolveEvent), 64, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
        ASSERT_NE(events_, nullptr);
        make_resolver(true);
    }
    // The data plane of this fixture; `hits_in_place` false: every request by the general path.
    void make_resolver(bool hits_in_place) {
        dp_.reset();
        std::vector<DpPortConfig> pc(2);
        MacAddr node, peer;
        std::memcpy(node.data(), kNode.data(), 6);
        std::memcpy(peer.data(), kPeerGw.data(), 6);
        pc[0] = {ports_[0].handle.port_id, PortRole::internal, ports_[0].handle.mac, be(kInternalIp), 24, 0, {{be(kNodeIp), node}}};
        pc[1] = {ports_[1].handle.port_id, PortRole::external, ports_[1].handle.mac, be(kExternalIp), 24, 0, {{be(kPeerIp), peer}}};
        DataplaneConfig cfg;
        cfg.resolve.port = kPort;
        cfg.resolve.resolver.party_id = 1;
        cfg.resolve.peers.push_back(DpPeer{be(kPeerIp), 2, kKey, kKeyId, {}, 0});
        cfg.resolve.hits_in_place = hits_in_place;
        dp_ = std::make_unique<Dataplane>(cfg, pc, g_pool, DpRings{punt_, inject_, nullptr, events_, &bell_.wake},
                                          DpShared{nullptr, nullptr, 0, &cache_});
    }
    void TearDown() override {
        dp_.reset();
        rte_ring_free(events_);
        DataplaneTest::TearDown();
    }

    static std::vector<uint8_t> message(MsgType type, uint16_t party, uint64_t seq, const void* body, std::size_t len,
                                        const PeerKeys* key) {
        std::vector<uint8_t> d(sizeof(MsgHeader) + len + (key != nullptr ? kMacLen : 0));
        MsgHeader h;
        encode(Header{type, party, static_cast<uint16_t>(len), seq, 0}, h);
        std::memcpy(d.data(), &h, sizeof h);
        std::memcpy(d.data() + sizeof h, body, len);
        if (key != nullptr) key->seal(d);
        return d;
    }
    std::vector<uint8_t> resolve_request(ProcessId target, uint64_t id) const {
        ResolveBody b;
        store_be64(b.target, target.value);
        return PacketBuilder().eth(gw_in_, kNode).ipv4(kNodeIp, kInternalIp).udp(40000, kPort)
            .payload(message(MsgType::resolve, 0, id, &b, sizeof b, nullptr)).build();
    }
    static DmaAddress record(ProcessId pid) {
        DmaAddress a;
        a.pid = pid;
        a.epoch = 9;
        a.transport = Transport::roce_v2;
        for (uint8_t i = 0; i < 16; ++i) a.gid[i] = static_cast<uint8_t>(0xa0 + i);
        a.qpn = 0x123456;
        a.mtu = 4096;
        a.ipv4 = 0xc6120a0b;
        a.port = 4791;
        a.ttl_s = 30;
        return a;
    }
    // The reply the node must get, built independently (the builder sums the UDP checksum itself).
    std::vector<uint8_t> expected_reply(ProcessId target, uint64_t id, ResolveStatus st, AnswerSource src,
                                        const DmaAddress* rec) const {
        ResolveReplyBody b{};
        b.status = static_cast<uint8_t>(st);
        b.source = static_cast<uint8_t>(src);
        store_be64(b.target, target.value);
        if (rec != nullptr) encode(*rec, b.record);
        auto f = PacketBuilder().eth(kNode, gw_in_).ipv4(kInternalIp, kNodeIp, 64, 0).udp(kPort, 40000)
                     .payload(message(MsgType::resolve_reply, 0, id, &b, sizeof b, nullptr)).build();
        f[20] = 0x40;  // the gateway sets DF
        f[24] = f[25] = 0;
        const uint16_t c = test::inet_checksum(&f[14], 20);
        f[24] = static_cast<uint8_t>(c >> 8);
        f[25] = static_cast<uint8_t>(c);
        return f;
    }

    ResolveCache cache_{64};
    rte_ring* events_ = nullptr;
    Doorbell bell_;
};

TEST_F(ResolveDataplaneTest, CacheHitIsAnsweredByTheLcoreWithExactBytesAndChecksums) {
    const DmaAddress rec = record(ProcessId::make(1, 5, 5));
    cache_.upsert(rec.pid, rec, CacheKind::local, 1, UINT64_MAX);
    receive(0, resolve_request(rec.pid, 0x1122334455667788ull));
    dp_->poll_once();
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], expected_reply(rec.pid, 0x1122334455667788ull, ResolveStatus::ok, AnswerSource::local, &rec));
    EXPECT_EQ(test::inet_checksum(&out[0][14], 20), 0);
    EXPECT_EQ(dp_->resolver()->counters().hits.get(), 1u);
    EXPECT_TRUE(sent(1).empty());
}

// A hit's reply route keeps the requester's MAC while the neighbour table vouches for it
// (NeighbourTable::version): a requester whose MAC changes gets the next reply at the new one.
TEST_F(ResolveDataplaneTest, AHitsReplyFollowsTheRequestersMacAsTheNeighbourTableHasIt) {
    const DmaAddress rec = record(ProcessId::make(1, 5, 5));
    cache_.upsert(rec.pid, rec, CacheKind::local, 1, UINT64_MAX);
    const char* const requester = "198.18.1.20";  // learned, not a static neighbour
    const test::Mac first{0x02, 0x00, 0x00, 0x00, 0x20, 0x01}, second{0x02, 0x00, 0x00, 0x00, 0x20, 0x02};
    const auto announce = [&](const test::Mac& mac) {  // an ARP request for our address: learned
        receive(0, PacketBuilder().eth(test::kBroadcast, mac).arp(1, mac, requester, {}, kInternalIp).build());
        for (int k = 0; k < 2; ++k) dp_->poll_once();
        sent(0);  // our ARP reply
    };
    uint64_t id = 1;
    const auto reply_mac = [&](const test::Mac& from) {
        ResolveBody b;
        store_be64(b.target, rec.pid.value);
        receive(0, PacketBuilder().eth(gw_in_, from).ipv4(requester, kInternalIp).udp(40000, kPort)
                       .payload(message(MsgType::resolve, 0, id++, &b, sizeof b, nullptr)).build());
        for (int k = 0; k < 2; ++k) dp_->poll_once();
        const auto out = sent(0);
        EXPECT_EQ(out.size(), 1u);
        test::Mac dst{};
        if (!out.empty() && out[0].size() >= 6) std::memcpy(dst.data(), out[0].data(), 6);
        return dst;
    };
    announce(first);
    EXPECT_EQ(reply_mac(first), first);
    EXPECT_EQ(reply_mac(first), first);  // from what the route kept
    announce(second);                    // the requester's MAC changes
    EXPECT_EQ(reply_mac(second), second);
    EXPECT_EQ(reply_mac(second), second);
    EXPECT_EQ(dp_->resolve_counters().hits_in_place.get(), 4u);
}

// A cache hit is answered in the request's own mbuf from the burst loop; every request near one in
// shape goes there or to the general path, and either way leaves as the general path alone sends
// it: the same frames out of both ports, the same drops, the same counts (fedgated built with
// hits_in_place off is the reference).
TEST_F(ResolveDataplaneTest, HitsAnsweredInPlaceAreTheGeneralPathsFramesAndCounts) {
    const DmaAddress local = record(ProcessId::make(1, 5, 5)), announced = record(ProcessId::make(2, 7, 7));
    cache_.upsert(local.pid, local, CacheKind::local, 1, UINT64_MAX);
    cache_.upsert(announced.pid, announced, CacheKind::announced, 2, UINT64_MAX);
    cache_.upsert(ProcessId::make(2, 6, 6), DmaAddress{}, CacheKind::negative, 2, UINT64_MAX);
    struct In {
        int port;
        std::vector<uint8_t> frame;
        uint64_t ol_flags = 0;
        uint16_t shift = 0;  // the frame starts this far past the mbuf's usual headroom
    };
    // A request whose message bytes `edit` changes (the UDP checksum summed after it).
    const auto edited = [&](ProcessId target, uint64_t id, const std::function<void(std::vector<uint8_t>&)>& edit,
                            const char* src = kNodeIp, const char* dst = kInternalIp) {
        ResolveBody b;
        store_be64(b.target, target.value);
        std::vector<uint8_t> msg = message(MsgType::resolve, 0, id, &b, sizeof b, nullptr);
        edit(msg);
        return PacketBuilder().eth(gw_in_, kNode).ipv4(src, dst).udp(40000, kPort).payload(msg).build();
    };
    const auto as_is = [](std::vector<uint8_t>&) {};
    std::vector<In> in;
    in.push_back({0, resolve_request(local.pid, 1)});                                 // a local record: in place
    in.push_back({0, resolve_request(announced.pid, 2)});                             // an announced one: in place
    in.push_back({0, resolve_request(ProcessId::make(0, 5, 5), 3)});                  // party 0, ours: in place
    in.push_back({0, resolve_request(local.pid, 4)});                                 // the requester's route again
    in.push_back({0, edited(local.pid, 5, as_is, kNodeIp, kExternalIp)});             // to our other address: general path
    in.push_back({0, edited(local.pid, 6, as_is, "198.18.1.20")});                    // a requester to ARP for: in place
    std::vector<uint8_t> no_sum = resolve_request(local.pid, 7);
    no_sum[40] = no_sum[41] = 0;                                                       // no UDP checksum: in place
    in.push_back({0, no_sum});
    std::vector<uint8_t> wrong_sum = resolve_request(local.pid, 8);
    wrong_sum[41] ^= 0x01;
    in.push_back({0, wrong_sum});                                                      // dropped
    // A UDP checksum summed over another source address than the header's (the pseudo-header's
    // part of the sum), with the IPv4 header's own sum right: dropped.
    std::vector<uint8_t> other_src = resolve_request(local.pid, 25);
    other_src[14 + 15] ^= 0x04;  // the source address's last byte
    other_src[14 + 10] = other_src[14 + 11] = 0;
    const uint16_t header_sum = rte_ipv4_cksum(reinterpret_cast<const rte_ipv4_hdr*>(other_src.data() + 14));
    std::memcpy(&other_src[14 + 10], &header_sum, 2);
    in.push_back({0, other_src});
    in.push_back({0, wrong_sum, RTE_MBUF_F_RX_L4_CKSUM_GOOD});                         // the device says good: in place
    in.push_back({0, resolve_request(local.pid, 9), RTE_MBUF_F_RX_L4_CKSUM_BAD});      // the device says bad: dropped
    in.push_back({0, resolve_request(ProcessId::make(2, 6, 6), 10)});                  // "not found", cached
    in.push_back({0, resolve_request(ProcessId::make(1, 9, 9), 11)});                  // ours, not registered
    in.push_back({0, resolve_request(ProcessId{0}, 12)});                              // a bad request
    in.push_back({0, edited(local.pid, 13, [](auto& m) { m[5] = 3; })});                // a sender party
    in.push_back({0, edited(local.pid, 14, [](auto& m) { m[16] = 1; })});               // a channel
    in.push_back({0, edited(local.pid, 15, [](auto& m) { m[17] = 1; })});               // a key ID: malformed
    in.push_back({0, edited(local.pid, 16, [](auto& m) { m[18] = 1; })});               // reserved: malformed
    in.push_back({0, edited(local.pid, 17, [](auto& m) { m.push_back(0); })});          // a byte past the body
    in.push_back({0, edited(local.pid, 18, [](auto& m) { m[7] = 9, m.push_back(0); })}); // a body of 9
    in.push_back({0, edited(local.pid, 19, [](auto& m) { m[0] = 'X'; })});              // not our magic
    in.push_back({0, edited(local.pid, 20, [](auto& m) { m[3] = static_cast<uint8_t>(MsgType::resolve_reply); })});
    in.push_back({1, PacketBuilder().eth(gw_ext_, kPeerGw).ipv4(kPeerIp, kExternalIp).udp(40000, kPort)
                         .payload(edited(local.pid, 21, as_is)).build()});             // on the external port
    in.push_back({0, edited(local.pid, 22, as_is, kNodeIp, "198.18.1.99")});          // not to us: dropped
    in.push_back({0, edited(local.pid, 23, as_is, "198.18.9.9")});                    // no route back: dropped
    in.push_back({0, resolve_request(local.pid, 24), 0, 2});                           // data moved in its mbuf
    // The two ends of one's-complement arithmetic, where a reply's checksum follows from its
    // request's: a request whose checksum field is 0xffff (its sum 0, as RFC 768 sends it), and
    // one whose reply's is (the reply's sum 0). Request IDs found by trying.
    const auto sum_field = [](const std::vector<uint8_t>& f) { return f.size() > 41 ? f[40] << 8 | f[41] : -1; };
    const auto id_with = [&](const std::function<bool(uint64_t)>& ok) {
        for (uint64_t id = 100; id < 100 + 0x20000; ++id)
            if (ok(id)) return id;
        ADD_FAILURE() << "no request ID found";
        return uint64_t{0};
    };
    const uint64_t request_ones = id_with([&](uint64_t id) { return sum_field(resolve_request(local.pid, id)) == 0xffff; });
    const uint64_t reply_ones = id_with([&](uint64_t id) {
        return sum_field(expected_reply(local.pid, id, ResolveStatus::ok, AnswerSource::local, &local)) == 0xffff;
    });
    in.push_back({0, resolve_request(local.pid, request_ones)});                       // in place
    in.push_back({0, resolve_request(local.pid, reply_ones)});                         // in place
    const std::size_t in_place = 9;

    struct Out {
        std::vector<std::vector<uint8_t>> frames[2];
        std::vector<uint64_t> drops;
        std::vector<uint64_t> counts;
    };
    const auto run = [&](bool hits_in_place) {
        make_resolver(hits_in_place);
        for (const In& i : in) {
            if (i.shift == 0) {
                receive(i.port, i.frame, i.ol_flags);
                continue;
            }
            // (EXPECT, not ASSERT: this lambda returns what it saw.)
            rte_mbuf* m = rte_pktmbuf_alloc(g_pool);
            const bool room = m != nullptr &&
                              rte_pktmbuf_append(m, static_cast<uint16_t>(i.frame.size() + i.shift)) != nullptr &&
                              rte_pktmbuf_adj(m, i.shift) != nullptr;
            EXPECT_TRUE(room);
            if (!room) continue;
            std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), i.frame.data(), i.frame.size());
            m->ol_flags |= i.ol_flags;
            EXPECT_EQ(rte_ring_enqueue(ports_[i.port].rx, m), 0);
        }
        for (int k = 0; k < 4; ++k) dp_->poll_once();
        Out o;
        for (int port = 0; port < 2; ++port) {
            o.frames[port] = sent(port);
            for (std::size_t r = 0; r < kDropReasonCount; ++r) o.drops.push_back(drops(port, static_cast<DropReason>(r)));
        }
        const ResolverCounters& c = dp_->resolver()->counters();
        const ResolveDpCounters& d = dp_->resolve_counters();
        for (const Counter* n : {&c.requests, &c.hits, &c.negative_hits, &c.misses, &c.not_found, &c.bad_requests,
                                 &d.client_msgs, &d.replies_sent, &d.peer_msgs, &dp_->counters().arp_requests_sent})
            o.counts.push_back(n->get());
        EXPECT_EQ(d.hits_in_place.get(), hits_in_place ? in_place : 0u);
        return o;
    };
    const Out fast = run(true), general = run(false);
    ASSERT_EQ(fast.frames[0].size(), general.frames[0].size());
    for (std::size_t i = 0; i < fast.frames[0].size(); ++i) EXPECT_EQ(fast.frames[0][i], general.frames[0][i]) << "frame " << i;
    EXPECT_EQ(fast.frames[1], general.frames[1]);
    EXPECT_EQ(fast.drops, general.drops);
    EXPECT_EQ(fast.counts, general.counts);
    // What the general path did with them, so that the comparison is not of two empty runs.
    EXPECT_EQ(general.frames[0].size(), 16u);  // 15 replies and an ARP request (a 16th reply waits on it)
    EXPECT_EQ(sum_field(in[in.size() - 2].frame), 0xffff) << "the request whose checksum is 0xffff";
    EXPECT_EQ(sum_field(fast.frames[0][15]), 0xffff) << "the reply whose checksum is 0xffff (the last frame)";
    EXPECT_EQ(fast.counts[1], in_place + 5u)
        << "hits: those answered in place, to our other address, with a sender party, a channel, no route and moved data";
    EXPECT_EQ(general.drops[static_cast<std::size_t>(DropReason::no_route)], 1u);
}

// A port whose device fills in checksums (TX offload): the reply leaves with the offload asked for
// in the mbuf and the fields prepared as DPDK's drivers expect; summed as the device would, it is
// the exact reply.
TEST_F(ResolveDataplaneTest, OnAPortWithChecksumOffloadTheReplyLeavesItsSumsToTheDevice) {
    std::vector<DpPortConfig> pc(2);
    MacAddr node;
    std::memcpy(node.data(), kNode.data(), 6);
    pc[0] = {ports_[0].handle.port_id, PortRole::internal, ports_[0].handle.mac, be(kInternalIp), 24, 0, {{be(kNodeIp), node}}};
    pc[0].tx_cksum = true;
    pc[1] = {ports_[1].handle.port_id, PortRole::external, ports_[1].handle.mac, be(kExternalIp), 24, 0, {}};
    DataplaneConfig cfg;
    cfg.resolve.port = kPort;
    cfg.resolve.resolver.party_id = 1;
    dp_ = std::make_unique<Dataplane>(cfg, pc, g_pool, DpRings{punt_, inject_, nullptr, events_, &bell_.wake},
                                      DpShared{nullptr, nullptr, 0, &cache_});
    const DmaAddress rec = record(ProcessId::make(1, 5, 5));
    cache_.upsert(rec.pid, rec, CacheKind::local, 1, UINT64_MAX);
    receive(0, resolve_request(rec.pid, 77));
    dp_->poll_once();
    const std::vector<rte_mbuf*> out = sent_mbufs(0);
    ASSERT_EQ(out.size(), 1u);
    rte_mbuf* m = out[0];
    EXPECT_EQ(m->ol_flags & (RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_L4_MASK),
              RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM);
    EXPECT_EQ(m->l2_len, 14u);
    EXPECT_EQ(m->l3_len, 20u);
    std::vector<uint8_t> f(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_mtod(m, const uint8_t*) + rte_pktmbuf_data_len(m));
    rte_pktmbuf_free(m);
    ASSERT_GE(f.size(), 42u);
    EXPECT_EQ(f[24] | f[25], 0) << "the IPv4 header checksum is the device's to write";
    // The device: the IPv4 header sum, and the UDP sum over the segment starting from the field's
    // pseudo-header value.
    const uint16_t ip_sum = test::inet_checksum(&f[14], 20);
    f[24] = static_cast<uint8_t>(ip_sum >> 8), f[25] = static_cast<uint8_t>(ip_sum);
    uint16_t udp_sum = test::inet_checksum(&f[34], f.size() - 34);
    if (udp_sum == 0) udp_sum = 0xffff;
    f[40] = static_cast<uint8_t>(udp_sum >> 8), f[41] = static_cast<uint8_t>(udp_sum);
    EXPECT_EQ(f, expected_reply(rec.pid, 77, ResolveStatus::ok, AnswerSource::local, &rec));
}

// The device's verdicts on received checksums stand: a request it calls good is answered even if
// its UDP sum is wrong, one it calls bad is dropped even if its sum is right.
TEST_F(ResolveDataplaneTest, TheReceivingDevicesChecksumVerdictsAreTrusted) {
    const DmaAddress rec = record(ProcessId::make(1, 5, 5));
    cache_.upsert(rec.pid, rec, CacheKind::local, 1, UINT64_MAX);
    std::vector<uint8_t> wrong = resolve_request(rec.pid, 1);
    wrong[40] ^= 0x5a;  // UDP checksum
    receive(0, wrong);  // no verdict: summed here, dropped
    receive(0, wrong, RTE_MBUF_F_RX_L4_CKSUM_GOOD | RTE_MBUF_F_RX_IP_CKSUM_GOOD);
    receive(0, resolve_request(rec.pid, 2), RTE_MBUF_F_RX_L4_CKSUM_BAD | RTE_MBUF_F_RX_IP_CKSUM_GOOD);
    std::vector<uint8_t> bad_ip = resolve_request(rec.pid, 3);
    bad_ip[24] ^= 0x5a;  // IPv4 header checksum
    receive(0, bad_ip, RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_GOOD);
    receive(0, resolve_request(rec.pid, 4), RTE_MBUF_F_RX_IP_CKSUM_BAD);
    dp_->poll_once();
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0], expected_reply(rec.pid, 1, ResolveStatus::ok, AnswerSource::local, &rec));
    EXPECT_EQ(out[1], expected_reply(rec.pid, 3, ResolveStatus::ok, AnswerSource::local, &rec));
    EXPECT_EQ(drops(0, DropReason::resolve_malformed), 2u);
    EXPECT_EQ(drops(0, DropReason::ipv4_bad_checksum), 1u);
}

TEST_F(ResolveDataplaneTest, MissIsQueriedAtTheOwnerAndItsSignedAnswerRelayed) {
    const ProcessId target = ProcessId::make(2, 9, 9);
    receive(0, resolve_request(target, 77));
    dp_->poll_once();
    EXPECT_TRUE(sent(0).empty());
    const auto q = sent(1);
    ASSERT_EQ(q.size(), 1u);
    // A directed query to the peer, sealed with the pair's key.
    const std::span<const uint8_t> dgram(q[0].data() + 42, q[0].size() - 42);
    ParsedMsg m;
    ASSERT_EQ(parse_message(dgram, m), WireError::ok);
    EXPECT_EQ(m.header.type, MsgType::query);
    EXPECT_EQ(m.header.sender_party, 1);
    const HmacKey key(kKey);
    EXPECT_TRUE(key.verify(m.authenticated, m.mac));
    EXPECT_EQ(m.header.key_id, kKeyId) << "the header names the key it is sealed with";
    QueryBody qb;
    std::memcpy(&qb, m.body.data(), sizeof qb);
    EXPECT_EQ(load_be64(qb.target), target.value);
    EXPECT_EQ(qb.mode, static_cast<uint8_t>(QueryMode::directed));

    // A forged answer changes nothing; the real one is relayed and reported to the control threads,
    // waking them from their sleep (the event alone, with nothing punted, rings the doorbell).
    const DmaAddress rec = record(target);
    AnswerBody a{};
    std::memcpy(a.query_id, qb.query_id, 8);
    store_be64(a.target, target.value);
    a.found = 1;
    encode(rec, a.record);
    const PeerKeys wrong = keys(std::vector<uint8_t>(32, 0x11)), right = keys(kKey);
    const auto answer = [&](const PeerKeys& k) {
        return PacketBuilder().eth(gw_ext_, kPeerGw).ipv4(kPeerIp, kExternalIp).udp(kPort, kPort)
            .payload(message(MsgType::answer, 2, SeqClock::realtime_ns(), &a, sizeof a, &k)).build();
    };
    bell_.wake.sleeping.store(true);
    receive(1, answer(wrong));
    dp_->poll_once();
    EXPECT_EQ(drops(1, DropReason::resolve_bad_mac), 1u);
    EXPECT_TRUE(sent(0).empty());
    EXPECT_FALSE(bell_.readable());
    receive(1, answer(right));
    dp_->poll_once();
    EXPECT_EQ(bell_.take(), 1u);
    EXPECT_FALSE(bell_.wake.sleeping.load());
    EXPECT_EQ(dp_->counters().punted.get(), 0u);
    const auto out = sent(0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], expected_reply(target, 77, ResolveStatus::ok, AnswerSource::directed, &rec));
    ResolveEvent ev;
    ASSERT_EQ(rte_ring_dequeue_elem(events_, &ev, sizeof ev), 0);
    EXPECT_EQ(ev.key, target);
    EXPECT_EQ(ev.record, rec);
    EXPECT_EQ(ev.negative, 0);
}

// A flood of forged messages from a peer's address: past the peer's budget their MACs are not even
// checked (counted as resolve_peer_rate_limited), and a good message within the budget still passes.
TEST_F(ResolveDataplaneTest, APeersMessagesPastItsBudgetAreDroppedBeforeTheirMacIsChecked) {
    std::vector<DpPortConfig> pc(2);
    MacAddr peer;
    std::memcpy(peer.data(), kPeerGw.data(), 6);
    pc[0] = {ports_[0].handle.port_id, PortRole::internal, ports_[0].handle.mac, be(kInternalIp), 24, 0, {}};
    pc[1] = {ports_[1].handle.port_id, PortRole::external, ports_[1].handle.mac, be(kExternalIp), 24, 0, {{be(kPeerIp), peer}}};
    DataplaneConfig cfg;
    cfg.resolve.port = kPort;
    cfg.resolve.resolver.party_id = 1;
    cfg.resolve.peers.push_back(DpPeer{be(kPeerIp), 2, kKey, kKeyId, {}, 0});
    cfg.resolve.peer_verify = PeerVerifyLimit{1, 4};  // four at once, then one a second
    dp_ = std::make_unique<Dataplane>(cfg, pc, g_pool, DpRings{punt_, inject_, nullptr, events_, &bell_.wake},
                                      DpShared{nullptr, nullptr, 0, &cache_});
    const PeerKeys good = keys(kKey), forged = keys(std::vector<uint8_t>(32, 0x77));
    const uint64_t seq0 = SeqClock::realtime_ns();
    SyncBody sb{};
    const auto from_peer = [&](uint64_t seq, const PeerKeys& key) {
        return PacketBuilder().eth(gw_ext_, kPeerGw).ipv4(kPeerIp, kExternalIp).udp(kPort, kPort)
            .payload(message(MsgType::sync, 2, seq, &sb, sizeof sb, &key)).build();
    };
    receive(1, from_peer(seq0 + 1, good));  // within the budget: checked, good, punted
    for (uint64_t i = 0; i < 20; ++i) receive(1, from_peer(seq0 + 2 + i, forged));
    dp_->poll_once();
    EXPECT_EQ(drops(1, DropReason::resolve_bad_mac), 3u) << "the budget's other three checks";
    EXPECT_EQ(drops(1, DropReason::resolve_peer_rate_limited), 17u);
    EXPECT_EQ(dp_->resolve_counters().punted_peer_msgs.get(), 1u);
}

// A rotation under way: the peer has a current key (ID 7) and a next one (ID 9). Messages under
// either pass; a key ID it has no key for is dropped before its MAC is checked (resolve_unknown_key),
// and a message that names one key but is sealed with another is a bad MAC. What the lcore sends
// stays under the current key.
TEST_F(ResolveDataplaneTest, DuringARotationMessagesUnderEitherKeyPassAndAnUnknownKeyIdIsDropped) {
    const std::vector<uint8_t> next_key(32, 0x6b);
    std::vector<DpPortConfig> pc(2);
    MacAddr peer;
    std::memcpy(peer.data(), kPeerGw.data(), 6);
    pc[0] = {ports_[0].handle.port_id, PortRole::internal, ports_[0].handle.mac, be(kInternalIp), 24, 0, {}};
    pc[1] = {ports_[1].handle.port_id, PortRole::external, ports_[1].handle.mac, be(kExternalIp), 24, 0, {{be(kPeerIp), peer}}};
    DataplaneConfig cfg;
    cfg.resolve.port = kPort;
    cfg.resolve.resolver.party_id = 1;
    cfg.resolve.peers.push_back(DpPeer{be(kPeerIp), 2, kKey, kKeyId, next_key, 9});
    dp_ = std::make_unique<Dataplane>(cfg, pc, g_pool, DpRings{punt_, inject_, nullptr, events_, &bell_.wake},
                                      DpShared{nullptr, nullptr, 0, &cache_});
    const PeerKeys current = keys(kKey), next({next_key, 9}), unknown({next_key, 5}),
                   mislabelled({next_key, kKeyId});  // the next key's MAC under the current key's ID
    const uint64_t seq0 = SeqClock::realtime_ns();
    SyncBody sb{};
    const auto from_peer = [&](uint64_t seq, const PeerKeys& k) {
        return PacketBuilder().eth(gw_ext_, kPeerGw).ipv4(kPeerIp, kExternalIp).udp(kPort, kPort)
            .payload(message(MsgType::sync, 2, seq, &sb, sizeof sb, &k)).build();
    };
    receive(1, from_peer(seq0 + 1, current));
    receive(1, from_peer(seq0 + 2, next));
    receive(1, from_peer(seq0 + 3, unknown));
    receive(1, from_peer(seq0 + 4, mislabelled));
    receive(1, from_peer(seq0 + 5, current));
    dp_->poll_once();
    EXPECT_EQ(dp_->resolve_counters().punted_peer_msgs.get(), 3u);
    EXPECT_EQ(drops(1, DropReason::resolve_unknown_key), 1u);
    EXPECT_EQ(drops(1, DropReason::resolve_bad_mac), 1u);
    rte_mbuf* punted[4];
    ASSERT_EQ(rte_ring_dequeue_burst(punt_, reinterpret_cast<void**>(punted), 4, nullptr), 3u);
    const uint8_t expect_ids[] = {kKeyId, 9, kKeyId};
    for (int i = 0; i < 3; ++i) {
        const auto* msg = rte_pktmbuf_mtod_offset(punted[i], const uint8_t*, 42);
        EXPECT_EQ(msg[kKeyIdOffset], expect_ids[i]) << "punted message " << i;
        rte_pktmbuf_free(punted[i]);
    }

    // Outgoing: a query to the peer is sealed with the current key and names its ID.
    receive(0, resolve_request(ProcessId::make(2, 9, 9), 78));
    dp_->poll_once();
    const auto q = sent(1);
    ASSERT_EQ(q.size(), 1u);
    ParsedMsg m;
    ASSERT_EQ(parse_message(std::span<const uint8_t>(q[0].data() + 42, q[0].size() - 42), m), WireError::ok);
    EXPECT_EQ(m.header.key_id, kKeyId);
    EXPECT_TRUE(HmacKey(kKey).verify(m.authenticated, m.mac));
}

TEST_F(ResolveDataplaneTest, ClientMessagesOnTheExternalPortAndPeerMessagesFromStrangersAreDropped) {
    ResolveBody b;
    store_be64(b.target, ProcessId::make(1, 5, 5).value);
    receive(1, PacketBuilder().eth(gw_ext_, kPeerGw).ipv4(kPeerIp, kExternalIp).udp(40000, kPort)
                   .payload(message(MsgType::resolve, 0, 1, &b, sizeof b, nullptr)).build());
    const PeerKeys key = keys(kKey);
    SyncBody sb{};
    receive(1, PacketBuilder().eth(gw_ext_, kPeerGw).ipv4("198.19.0.3", kExternalIp).udp(kPort, kPort)
                   .payload(message(MsgType::sync, 2, SeqClock::realtime_ns(), &sb, sizeof sb, &key)).build());
    receive(0, PacketBuilder().eth(gw_in_, kNode).ipv4(kNodeIp, kInternalIp).udp(40000, kPort).payload(7).build());
    dp_->poll_once();
    EXPECT_EQ(drops(1, DropReason::resolve_wrong_port), 1u);
    EXPECT_EQ(drops(1, DropReason::resolve_unknown_peer), 1u);
    EXPECT_EQ(drops(0, DropReason::resolve_malformed), 1u);
    EXPECT_TRUE(sent(0).empty());
    EXPECT_TRUE(sent(1).empty());
}

}  // namespace
}  // namespace fedgate

// ---- RoCE v2 between parties ----------------------------------------------------------------------

#include "controlplane/roce_translations.hpp"

namespace fedgate {
namespace {

// One RDMA connection through gateway A: node 198.18.1.10 (QP 0x123) and the peer gateway's
// external address 198.19.0.2 (its vQPN 0x777). Static neighbours, so nothing waits for ARP.
class RoceDataplaneTest : public DataplaneTest {
protected:
    static constexpr const char* kNodeIp = "198.18.1.10";
    static constexpr const char* kPeerIp = "198.19.0.2";
    static constexpr uint32_t kNodeQpn = 0x123, kPeerVqpn = 0x777;

    void SetUp() override {
        DataplaneTest::SetUp();
        dp_.reset();
        MacAddr node, peer;
        std::memcpy(node.data(), kNode.data(), 6);
        std::memcpy(peer.data(), kPeerGw.data(), 6);
        std::vector<DpPortConfig> pc(2);
        pc[0] = {ports_[0].handle.port_id, PortRole::internal, ports_[0].handle.mac, be(kInternalIp), 24, 0, {{be(kNodeIp), node}}};
        pc[1] = {ports_[1].handle.port_id, PortRole::external, ports_[1].handle.mac, be(kExternalIp), 24, 0, {{be(kPeerIp), peer}}};
        roce_ = std::make_unique<RoceTranslations>(16, pc, [] {});
        dp_ = std::make_unique<Dataplane>(DataplaneConfig{}, pc, g_pool, DpRings{punt_, inject_},
                                          DpShared{nullptr, nullptr, 0, nullptr, &roce_->view()});
        vi_ = *roce_->reserve(RoceSide::internal);
        ve_ = *roce_->reserve(RoceSide::external);
        RoceConn c;
        c.conn_id = 1;
        c.initiator = c.local = ProcessId::make(1, 3, 100);
        c.target = c.remote = ProcessId::make(2, 7, 42);
        c.peer_party = 2;
        c.node_addr = test::ip(kNodeIp);
        c.node_qpn = kNodeQpn;
        c.peer_addr = test::ip(kPeerIp);
        c.peer_vqpn = kPeerVqpn;
        c.internal_vqpn = vi_;
        c.external_vqpn = ve_;
        ASSERT_TRUE(roce_->install(c, 0));
    }
    void TearDown() override {
        dp_.reset();
        roce_.reset();
        DataplaneTest::TearDown();
    }

    // A RoCE v2 frame; `tos` set after the builder, with the header checksum fixed (the ICRC masks it).
    static std::vector<uint8_t> roce(const test::Mac& dst_mac, const test::Mac& src_mac, const char* src, const char* dst,
                                     uint8_t ttl, uint8_t op, uint32_t dqpn, std::size_t payload, uint8_t tos = 0) {
        auto f = PacketBuilder()
                     .eth(dst_mac, src_mac)
                     .ipv4(src, dst, ttl, 4242)
                     .udp(50123, kRoceV2Port)
                     .udp_no_checksum()
                     .bth(op, dqpn, 0x654321, 0x40, true)
                     .payload(payload, 3)
                     .icrc()
                     .build();
        f[15] = tos;
        f[24] = f[25] = 0;
        const uint16_t c = test::inet_checksum(&f[14], 20);
        f[24] = static_cast<uint8_t>(c >> 8), f[25] = static_cast<uint8_t>(c);
        return f;
    }

    std::unique_ptr<RoceTranslations> roce_;
    uint32_t vi_ = 0, ve_ = 0;
};

TEST_F(RoceDataplaneTest, NodeToPeerIsTranslatedByteForByteKeepingDscpAndEcn) {
    for (const std::size_t payload : {16, 1024}) {  // SEND ONLY, RDMA WRITE ONLY (RETH + data)
        const uint8_t op = payload == 16 ? 0x04 : 0x0a;
        receive(0, roce(gw_in_, kNode, kNodeIp, kInternalIp, 64, op, vi_, payload, 0x6a));
        dp_->poll_once();
        const auto out = sent(1);
        ASSERT_EQ(out.size(), 1u);
        // The builder computes the ICRC itself: equal bytes mean the incremental update is right.
        EXPECT_EQ(out[0], roce(kPeerGw, gw_ext_, kExternalIp, kPeerIp, 63, op, kPeerVqpn, payload, 0x6a)) << payload;
    }
    EXPECT_EQ(roce_->view().find(RoceSide::internal, vi_)->packets.get(), 2u);
}

TEST_F(RoceDataplaneTest, PeerToNodeCarriesAckAndCnpToTheRealQpn) {
    for (const uint8_t op : {uint8_t{0x11}, kOpCnp, uint8_t{0x10}}) {  // ACK (AETH), CNP (16 bytes), READ RESPONSE ONLY
        const std::size_t payload = op == 0x11 ? 4 : op == kOpCnp ? 16 : 256;
        receive(1, roce(gw_ext_, kPeerGw, kPeerIp, kExternalIp, 50, op, ve_, payload, 0x03));
        dp_->poll_once();
        const auto out = sent(0);
        ASSERT_EQ(out.size(), 1u) << int(op);
        EXPECT_EQ(out[0], roce(kNode, gw_in_, kInternalIp, kNodeIp, 49, op, kNodeQpn, payload, 0x03)) << int(op);
    }
    EXPECT_EQ(roce_->view().find(RoceSide::external, ve_)->packets.get(), 3u);
}

TEST_F(RoceDataplaneTest, ACorruptIcrcArrivesCorrupt) {
    auto in = roce(gw_in_, kNode, kNodeIp, kInternalIp, 64, 0x04, vi_, 64);
    in[14 + 40 + 7] ^= 0x10;  // a payload bit flipped on the way to us
    receive(0, in);
    dp_->poll_once();
    const auto out = sent(1);
    ASSERT_EQ(out.size(), 1u);
    auto want = roce(kPeerGw, gw_ext_, kExternalIp, kPeerIp, 63, 0x04, kPeerVqpn, 64);
    want[14 + 40 + 7] ^= 0x10;  // the same flip, under the ICRC of the unflipped packet
    EXPECT_EQ(out[0], want);
    EXPECT_NE(icrc_compute(&out[0][14], static_cast<uint32_t>(out[0].size() - 14)), icrc_load(&out[0][out[0].size() - 4]));
}

TEST_F(RoceDataplaneTest, WhatWasNotNegotiatedIsDroppedUnderItsOwnReason) {
    receive(0, roce(gw_in_, kNode, kNodeIp, kInternalIp, 64, 0x04, vi_ + 1, 16));          // no such vQPN
    receive(0, roce(gw_in_, kNode, kNodeIp, kInternalIp, 64, 0x04, ve_ == vi_ ? vi_ + 2 : ve_, 16));
    receive(0, roce(gw_in_, kNode, "198.18.1.11", kInternalIp, 64, 0x04, vi_, 16));         // spoofed node
    receive(1, roce(gw_ext_, kPeerGw, "198.19.0.3", kExternalIp, 64, 0x04, ve_, 16));       // not the peer
    receive(0, roce(gw_in_, kNode, kNodeIp, kInternalIp, 64, 0x64, vi_, 16));               // UD SEND ONLY
    auto shorty = PacketBuilder().eth(gw_in_, kNode).ipv4(kNodeIp, kInternalIp).udp(1, kRoceV2Port).payload(8).build();
    receive(0, shorty);                                                                         // no room for BTH+ICRC
    receive(0, roce(gw_in_, kNode, kNodeIp, kInternalIp, 1, 0x04, vi_, 16));                // TTL runs out
    dp_->poll_once();
    EXPECT_TRUE(sent(0).empty());
    EXPECT_TRUE(sent(1).empty());
    EXPECT_EQ(drops(0, DropReason::roce_no_translation), 2u);
    EXPECT_EQ(drops(0, DropReason::roce_wrong_source), 1u);
    EXPECT_EQ(drops(1, DropReason::roce_not_peer), 1u);
    EXPECT_EQ(drops(0, DropReason::roce_opcode_unsupported), 1u);
    EXPECT_EQ(drops(0, DropReason::roce_malformed), 1u);
    EXPECT_EQ(drops(0, DropReason::ttl_expired), 1u);
}

TEST_F(RoceDataplaneTest, ARemovedTranslationPassesNothing) {
    roce_->remove_process(ProcessId::make(1, 3, 100));
    receive(0, roce(gw_in_, kNode, kNodeIp, kInternalIp, 64, 0x04, vi_, 16));
    dp_->poll_once();
    EXPECT_TRUE(sent(1).empty());
    EXPECT_EQ(drops(0, DropReason::roce_no_translation), 1u);
}

// ---- what wakes an idle lcore: each port kind's wake source ------------------------------------

// af_xdp fills its fill ring with 2048 mbufs per port: more than g_pool has.
rte_mempool* xdp_pool() {
    static rte_mempool* pool = rte_pktmbuf_pool_create("xdp_mbufs", 8191, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    return pool;
}

// A veth pair in the test's own namespace (made by iproute2, as the lab does), removed at the end.
class VethPair {
public:
    explicit VethPair(const std::string& name) : a_(name + "a"), b_(name + "b") {
        ok_ = std::system(("ip link add " + a_ + " type veth peer name " + b_ + " && ip link set " + a_ + " up && ip link set " + b_ +
                           " up").c_str()) == 0;
    }
    ~VethPair() { std::system(("ip link del " + a_ + " 2>/dev/null").c_str()); }
    bool ok() const { return ok_; }
    const std::string& a() const { return a_; }
    const std::string& b() const { return b_; }

private:
    std::string a_, b_;
    bool ok_ = false;
};

// Sends one broadcast frame of a local experimental EtherType out of `iface`, from the kernel side.
void send_frame_on(const std::string& iface) {
    const int fd = ::socket(AF_PACKET, SOCK_RAW, 0);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
    sll.sll_halen = 6;
    std::vector<uint8_t> frame(60, 0);
    std::memset(frame.data(), 0xff, 6);
    const uint8_t src[6] = {0x02, 0, 0, 0, 0x77, 0x01};
    std::memcpy(frame.data() + 6, src, 6);
    frame[12] = 0x88;
    frame[13] = 0xb5;
    ASSERT_EQ(::sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&sll), sizeof sll),
              static_cast<ssize_t>(frame.size()))
        << std::strerror(errno);
    ::close(fd);
}

// Polls the port until a frame of that EtherType arrives (or 10 s pass); frees what it reads.
bool receive_marked_frame(uint16_t port_id) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
        rte_mbuf* pkts[32];
        const uint16_t n = rte_eth_rx_burst(port_id, 0, pkts, 32);
        bool found = false;
        for (uint16_t i = 0; i < n; ++i) {
            const auto* d = rte_pktmbuf_mtod(pkts[i], const uint8_t*);
            found = found || (rte_pktmbuf_data_len(pkts[i]) >= 14 && d[12] == 0x88 && d[13] == 0xb5);
            rte_pktmbuf_free(pkts[i]);
        }
        if (found) return true;
    }
    return false;
}

// The wake source of a port's queue 0 ends an hour-long wait when a frame arrives on it, and the
// frame is then there to read; closing the port forgets the source.
void expect_traffic_wakes(const PortHandle& h, const std::string& kernel_side, bool interrupt) {
    const RxWakeSource src = rx_wake_source(h.port_id, 0);
    ASSERT_GE(src.fd, 0) << "no wake source recorded for " << h.driver;
    EXPECT_EQ(src.interrupt, interrupt);
    const RxQueueRef q{h.port_id, 0};
    IdleWaiter waiter(std::span<const RxQueueRef>(&q, 1));
    ASSERT_TRUE(waiter.wakeable());
    send_frame_on(kernel_side);
    EXPECT_TRUE(waiter.wait(3'600'000'000u)) << "the wait ended without the descriptor turning readable";
    EXPECT_TRUE(receive_marked_frame(h.port_id));
}

TEST(PortWakeSource, AfPacketSocketWakesOnAFrame) {
    VethPair veth("fgwp");
    ASSERT_TRUE(veth.ok());
    const PortHandle h = bring_up_port(PortSetup{"p", "net_af_packet_w0,iface=" + veth.a()}, g_pool);
    expect_traffic_wakes(h, veth.b(), false);
    close_port(h);
    EXPECT_EQ(rx_wake_source(h.port_id, 0).fd, -1);
}

TEST(PortWakeSource, AfXdpSocketWakesOnAFrame) {
    const int probe = ::socket(44 /* AF_XDP */, SOCK_RAW, 0);
    if (probe < 0) GTEST_SKIP() << "this kernel has no XDP sockets: " << std::strerror(errno);
    ::close(probe);
    VethPair veth("fgwx");
    ASSERT_TRUE(veth.ok());
    const PortHandle h = bring_up_port(PortSetup{"x", "net_af_xdp_w0,iface=" + veth.a() + ",busy_budget=0"}, xdp_pool());
    EXPECT_EQ(h.driver, "net_af_xdp");
    expect_traffic_wakes(h, veth.b(), false);
    close_port(h);
    EXPECT_EQ(rx_wake_source(h.port_id, 0).fd, -1);
}

TEST(PortWakeSource, TapRxInterruptWakesOnAFrame) {
    const PortHandle h = bring_up_port(PortSetup{"t", "net_tap_w0,iface=fgtapw0"}, g_pool);
    ASSERT_EQ(std::system("ip link set fgtapw0 up"), 0);
    expect_traffic_wakes(h, "fgtapw0", true);
    close_port(h);
}

template <class Cond>
bool wait_for(Cond&& cond, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!cond() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return cond();
}

// One worker on an af_packet port over a veth of its own, with a doorbell, running on a thread;
// once idle it waits up to 10 s at a time. `requests`: its control ring, if any.
class VethWorker {
public:
    VethWorker(const std::string& veth_name, const std::string& vdev, IdleConfig idle, rte_ring* requests = nullptr)
        : veth_(veth_name) {
        if (!veth_.ok()) return;
        port_ = bring_up_port(PortSetup{vdev, "net_af_packet_" + vdev + ",iface=" + veth_.a()}, g_pool);
        DataplaneConfig cfg;
        cfg.idle = idle;
        cfg.idle.spin = false;
        cfg.idle.max_sleep_us = 10'000'000;
        cfg.idle.deep_sleep_max_us = 10'000'000;
        std::vector<DpPortConfig> pc(1);
        pc[0] = {port_.port_id, PortRole::internal, port_.mac, be("198.18.7.1"), 24, 0, {}};
        bell.fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (bell.fd < 0) return;
        dp = std::make_unique<Dataplane>(cfg, pc, g_pool, DpRings{nullptr, nullptr, requests, nullptr, nullptr, &bell});
        lcore_ = std::thread([this] {
            dp->run(quit_);
            ended_ = true;
        });
    }
    ~VethWorker() {
        if (lcore_.joinable()) {
            quit_ = true;
            // Rung until the loop ends: a ring before its next wait starts finds nobody asleep.
            EXPECT_TRUE(wait_for([&] { bell.ring(); return ended_.load(); }, std::chrono::seconds(30)));
            lcore_.join();
        }
        dp.reset();
        if (bell.fd >= 0) ::close(bell.fd);
        if (veth_.ok()) close_port(port_);
    }
    VethWorker(const VethWorker&) = delete;
    VethWorker& operator=(const VethWorker&) = delete;

    bool ok() const { return dp != nullptr; }
    // The kernel's end of the veth, to send frames from.
    std::string kernel_side() const { return veth_.b(); }
    bool asleep() const { return bell.sleeping.load(); }

    LcoreWake bell;
    std::unique_ptr<Dataplane> dp;

private:
    VethPair veth_;
    PortHandle port_{};
    std::atomic<bool> quit_{false}, ended_{false};
    std::thread lcore_;
};

// A worker asleep on its queue's wake source (here with naps of 10 s) is woken by its doorbell when
// a control request arrives: the answer comes long before the nap would end.
TEST(LcoreDoorbell, AControlRequestWakesASleepingWorker) {
    rte_ring* requests = rte_ring_create("dbreq", 8, 0, RING_F_SC_DEQ);
    ASSERT_NE(requests, nullptr);
    {
        VethWorker w("fgdb", "d0", IdleConfig{.empty_polls_before_sleep = 4}, requests);
        ASSERT_TRUE(w.ok());
        // Asleep: its flag is up (and stays up past the empty polls).
        EXPECT_TRUE(wait_for([&] { return w.asleep(); }, std::chrono::seconds(20)));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ASSERT_TRUE(w.asleep()) << "the worker should be in its 10 s wait";

        auto req = std::make_unique<DpRequest>();
        req->kind = DpRequest::Kind::session_dump;
        ASSERT_EQ(rte_ring_mp_enqueue(requests, req.get()), 0);
        w.bell.ring();
        EXPECT_TRUE(wait_for([&] { return req->done.load(std::memory_order_acquire); }, std::chrono::seconds(5)))
            << "the doorbell did not end the wait";
        EXPECT_GE(w.dp->counters().doorbell_wakeups.get(), 1u);
    }
    rte_ring_free(requests);
}

// After a packet the worker polls on, yielding before each poll, for idle_yield_us (here 5 s, far
// longer than the test needs for its checks) instead of waiting; then it waits. The veth's own
// frames (IPv6 neighbour discovery) are packets too, so the test first waits for the wait.
TEST(LcoreIdle, AfterAPacketTheWorkerYieldsInsteadOfWaiting) {
    VethWorker w("fgyl", "y0", IdleConfig{.empty_polls_before_sleep = 4, .yield_us = 5'000'000});
    ASSERT_TRUE(w.ok());
    const LcoreCounters& c = w.dp->counters();
    ASSERT_TRUE(wait_for([&] { return w.asleep(); }, std::chrono::seconds(60)));
    const uint64_t sleeps = c.idle_sleeps.get(), yields = c.idle_yields.get(), busy = c.busy_polls.get();

    send_frame_on(w.kernel_side());
    EXPECT_TRUE(wait_for([&] { return c.busy_polls.get() > busy; }, std::chrono::seconds(20))) << "the frame was not polled";
    EXPECT_TRUE(wait_for([&] { return c.idle_yields.get() >= yields + 1000; }, std::chrono::seconds(4)));
    // Still polling: no wait began after the one the frame ended.
    EXPECT_FALSE(w.asleep());
    EXPECT_EQ(c.idle_sleeps.get(), sleeps);
    // The window over, it waits again.
    EXPECT_TRUE(wait_for([&] { return w.asleep(); }, std::chrono::seconds(60)));
    EXPECT_GT(c.idle_sleeps.get(), sleeps);
}

TEST(PortWakeSource, RingPortsHaveNoneSoTheLcoreNaps) {
    const PortHandle h = bring_up_port(PortSetup{"r", "net_ring_w0"}, g_pool);
    EXPECT_EQ(rx_wake_source(h.port_id, 0).fd, -1);
    const RxQueueRef q{h.port_id, 0};
    EXPECT_FALSE(IdleWaiter(std::span<const RxQueueRef>(&q, 1)).wakeable());
    close_port(h);
}

// ---- af_xdp refusals name the interface and the cause ---------------------------------------------

std::string bring_up_error(const std::string& device, rte_mempool* pool) {
    try {
        close_port(bring_up_port(PortSetup{"ext", device}, pool));
    } catch (const PortError& e) {
        return e.what();
    }
    return "";
}

TEST(PortAfXdp, AMissingInterfaceIsNamed) {
    const std::string e = bring_up_error("net_af_xdp_e0,iface=fgnosuch0", xdp_pool());
    EXPECT_NE(e.find("no interface 'fgnosuch0' in this network namespace"), std::string::npos) << e;
    EXPECT_NE(e.find("port 'ext'"), std::string::npos) << e;
}

TEST(PortAfXdp, DevargsWithoutAnInterfaceAreRefused) {
    const std::string e = bring_up_error("net_af_xdp_e1", xdp_pool());
    EXPECT_NE(e.find("af_xdp needs iface=<interface>"), std::string::npos) << e;
}

TEST(PortAfXdp, AnMtuTooLargeForTheMbufsIsRefusedWithTheLimit) {
    const int probe = ::socket(44 /* AF_XDP */, SOCK_RAW, 0);
    if (probe < 0) GTEST_SKIP() << "this kernel has no XDP sockets: " << std::strerror(errno);
    ::close(probe);
    VethPair veth("fgwm");
    ASSERT_TRUE(veth.ok());
    ASSERT_EQ(std::system(("ip link set " + veth.a() + " mtu 3000").c_str()), 0);
    const std::string e = bring_up_error("net_af_xdp_e2,iface=" + veth.a(), xdp_pool());
    EXPECT_NE(e.find("its MTU 3000 is too large"), std::string::npos) << e;
    EXPECT_NE(e.find("'" + veth.a() + "'"), std::string::npos) << e;
}

TEST(PortAfXdp, APoolTooSmallForTheFillRingIsRefusedWithTheCount) {
    VethPair veth("fgwf");
    ASSERT_TRUE(veth.ok());
    const std::string e = bring_up_error("net_af_xdp_e3,iface=" + veth.a(), g_pool);  // 2047 mbufs
    EXPECT_NE(e.find("its fill ring takes 2048 mbufs per queue (1 queue(s)) and the pool has"), std::string::npos) << e;
    EXPECT_NE(e.find("'" + veth.a() + "'"), std::string::npos) << e;
}

TEST(PortAfXdp, AnInterfaceWithAnotherXdpProgramIsRefusedWithTheCause) {
    const int probe = ::socket(44 /* AF_XDP */, SOCK_RAW, 0);
    if (probe < 0) GTEST_SKIP() << "this kernel has no XDP sockets: " << std::strerror(errno);
    ::close(probe);
    VethPair veth("fgwo");
    ASSERT_TRUE(veth.ok());
    // The first port's program stays on the interface while it lives: a second port cannot attach.
    const PortHandle first = bring_up_port(PortSetup{"x", "net_af_xdp_o0,iface=" + veth.a() + ",busy_budget=0"}, xdp_pool());
    const std::string e = bring_up_error("net_af_xdp_o1,iface=" + veth.a() + ",busy_budget=0", xdp_pool());
    close_port(first);
    EXPECT_NE(e.find("cannot attach af_xdp to '" + veth.a() + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("another XDP program"), std::string::npos) << e;
}

}  // namespace
}  // namespace fedgate
