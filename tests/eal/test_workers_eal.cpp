// Two data-plane workers on net_ring ports with two queue pairs each (no RSS, as on the vdevs):
// flows spread by the workers' own hash, a reply reaches the worker whose slice holds its session
// port through the hand-off ring, every worker learns ARP, and the counters add up exactly.
#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dataplane/dataplane.hpp"
#include "drivers/port.hpp"
#include "tests/support/nat_fixtures.hpp"

namespace fedgate {
namespace {

using namespace fedgate::test;
constexpr uint16_t kWorkers = 2;
constexpr int kFlows = 64;

const Mac kNodeMac{0x02, 0, 0, 0, 1, 0x0a}, kPeerMac{0x02, 0, 0, 0, 2, 0x01}, kOtherNodeMac{0x02, 0, 0, 0, 1, 0x0b};
// A second node with a configured neighbour entry, as kNode has.
constexpr const char* kThirdNode = "198.18.1.12";
const Mac kThirdNodeMac{0x02, 0, 0, 0, 1, 0x0c};

MacAddr mac_addr(const Mac& m) {
    MacAddr a;
    std::memcpy(a.data(), m.data(), 6);
    return a;
}

Mac mac_of(const rte_ether_addr& a) {
    Mac m;
    std::memcpy(m.data(), a.addr_bytes, 6);
    return m;
}

uint16_t be16_at(const std::vector<uint8_t>& f, std::size_t o) { return static_cast<uint16_t>(f[o] << 8 | f[o + 1]); }

class WorkersTest : public ::testing::Test {
protected:
    void SetUp() override {
        static int seq = 0;
        const std::string tag = "wk" + std::to_string(seq++);
        pool_ = rte_pktmbuf_pool_create((tag + "pool").c_str(), 4095, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
        ASSERT_NE(pool_, nullptr);
        for (int i = 0; i < 2; ++i) {
            const std::string n = tag + "p" + std::to_string(i);
            for (uint16_t q = 0; q < kWorkers; ++q) {
                rx_[i][q] = rte_ring_create((n + "rx" + std::to_string(q)).c_str(), 512, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
                tx_[i][q] = rte_ring_create((n + "tx" + std::to_string(q)).c_str(), 512, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
            }
            ASSERT_GE(rte_eth_from_rings(n.c_str(), rx_[i].data(), kWorkers, tx_[i].data(), kWorkers, 0), 0);
            PortSetup setup{n, "net_ring_" + n};
            setup.queues = kWorkers;
            handles_[i] = bring_up_port(setup, pool_);
            ASSERT_EQ(handles_[i].queues, kWorkers);
            ASSERT_FALSE(handles_[i].rss);  // net_ring has no RSS: the workers steer in software
        }
        std::vector<DpPortConfig> pc(2);
        pc[0] = {handles_[0].port_id, PortRole::internal, handles_[0].mac, net_addr(kInternalAddr), 24, 0,
                 {{net_addr(kNode), mac_addr(kNodeMac)}, {net_addr(kThirdNode), mac_addr(kThirdNodeMac)}}, false};
        pc[1] = {handles_[1].port_id, PortRole::external, handles_[1].mac, net_addr(kExternalAddr), 24, 0,
                 {{net_addr(kPeer), mac_addr(kPeerMac)}}, false};
        import_.peer_addr = net_addr(kPeer);
        import_.peer_port = htons(kPeerTcpPort);
        maps_.publish(L4Proto::tcp, htons(kImportTcpPort), &import_);
        punt_ = rte_ring_create((tag + "punt").c_str(), 256, 0, RING_F_SC_DEQ);
        for (uint16_t w = 0; w < kWorkers; ++w) {
            handoff_.push_back(rte_ring_create((tag + "ho" + std::to_string(w)).c_str(), 1024, 0, RING_F_SC_DEQ));
            ASSERT_NE(handoff_.back(), nullptr);
        }
        for (uint16_t w = 0; w < kWorkers; ++w) {
            DataplaneConfig cfg;
            cfg.nat.worker = w;
            cfg.nat.workers = kWorkers;
            dps_[w] = std::make_unique<Dataplane>(cfg, pc, pool_, DpRings{punt_, nullptr, nullptr, nullptr, nullptr},
                                                  DpShared{&maps_}, DpWorker{w, kWorkers, handoff_});
        }
        gw_in_ = mac_of(handles_[0].mac);
        gw_ext_ = mac_of(handles_[1].mac);
    }

    void TearDown() override {
        for (auto& dp : dps_) dp.reset();
        for (int i = 0; i < 2; ++i) {
            close_port(handles_[i]);
            for (uint16_t q = 0; q < kWorkers; ++q) {
                drain(rx_[i][q]);
                drain(tx_[i][q]);
                rte_ring_free(rx_[i][q]);
                rte_ring_free(tx_[i][q]);
            }
        }
        std::vector<rte_ring*> rings = handoff_;
        rings.push_back(punt_);
        for (rte_ring* r : rings) {
            drain(r);
            rte_ring_free(r);
        }
        rte_mempool_free(pool_);
    }

    static void drain(rte_ring* r) {
        void* m;
        while (r != nullptr && rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
    }

    void receive(int port, uint16_t queue, const std::vector<uint8_t>& frame) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool_);
        ASSERT_NE(m, nullptr);
        std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size())), frame.data(), frame.size());
        ASSERT_EQ(rte_ring_enqueue(rx_[port][queue], m), 0);
    }

    // Polls the workers in turn until a round finds nothing to do (hand-offs take a second round).
    void settle() {
        for (int round = 0; round < 16; ++round) {
            uint32_t handled = 0;
            for (auto& dp : dps_) handled += dp->poll_once();
            if (handled == 0) return;
        }
        FAIL() << "the workers kept finding packets";
    }

    // What the port sent, per TX queue (= the worker that sent it).
    std::array<std::vector<std::vector<uint8_t>>, kWorkers> sent(int port) {
        std::array<std::vector<std::vector<uint8_t>>, kWorkers> out;
        for (uint16_t q = 0; q < kWorkers; ++q) {
            void* p;
            while (rte_ring_dequeue(tx_[port][q], &p) == 0) {
                auto* m = static_cast<rte_mbuf*>(p);
                const auto* d = rte_pktmbuf_mtod(m, const uint8_t*);
                out[q].emplace_back(d, d + rte_pktmbuf_data_len(m));
                rte_pktmbuf_free(m);
            }
        }
        return out;
    }

    uint64_t sum(int port, Counter PortCounters::*c) const {
        uint64_t t = 0;
        for (const auto& dp : dps_) t += (dp->port_counters(port).*c).get();
        return t;
    }

    uint64_t fast_path() const {
        uint64_t t = 0;
        for (const auto& dp : dps_) t += dp->nat_counters().fast_path.get();
        return t;
    }

    std::vector<uint8_t> syn(uint16_t sport) {
        return PacketBuilder().eth(gw_in_, kNodeMac).ipv4(kNode, kInternalAddr, 64, 1).tcp(sport, kImportTcpPort, kSyn, 100).build();
    }

    // Opens a session from the node's `node_port` (its SYN out, the peer's SYN-ACK back on the worker
    // that owns the session port) and returns the session port; both take the full path.
    uint16_t establish(uint16_t node_port) {
        receive(0, 0, syn(node_port));
        settle();
        uint16_t port = 0;
        for (const auto& q : sent(1))
            for (const auto& f : q) port = be16_at(f, 14 + 20);
        EXPECT_NE(port, 0u);
        const uint16_t w = port % kWorkers;
        receive(1, w, PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, 7).tcp(kPeerTcpPort, port, kSyn | kAck, 9000).build());
        settle();
        EXPECT_EQ(sent(0)[w].size(), 1u);
        return port;
    }

    rte_mempool* pool_ = nullptr;
    std::array<std::array<rte_ring*, kWorkers>, 2> rx_{}, tx_{};
    PortHandle handles_[2];
    PortMapView maps_;
    ImportRule import_;
    rte_ring* punt_ = nullptr;
    std::vector<rte_ring*> handoff_;
    std::array<std::unique_ptr<Dataplane>, kWorkers> dps_;
    Mac gw_in_{}, gw_ext_{};
};

TEST_F(WorkersTest, FlowsSpreadOverBothWorkersAndEachSessionPortComesFromItsWorkersSlice) {
    for (int i = 0; i < kFlows; ++i) receive(0, 0, syn(static_cast<uint16_t>(41000 + i)));  // all on queue 0
    settle();
    const auto out = sent(1);
    std::set<uint16_t> ports;
    for (uint16_t q = 0; q < kWorkers; ++q) {
        EXPECT_GT(out[q].size(), 0u) << "worker " << q << " opened no session: flows did not spread";
        for (const auto& f : out[q]) {
            const uint16_t sport = be16_at(f, 14 + 20);
            EXPECT_EQ(sport % kWorkers, q) << "worker " << q << " sent with session port " << sport;
            ports.insert(sport);
        }
    }
    EXPECT_EQ(out[0].size() + out[1].size(), static_cast<std::size_t>(kFlows));
    EXPECT_EQ(ports.size(), static_cast<std::size_t>(kFlows)) << "a session port was handed out twice";
    EXPECT_EQ(dps_[0]->nat_counters().sessions_created.get() + dps_[1]->nat_counters().sessions_created.get(), static_cast<uint64_t>(kFlows));
    EXPECT_EQ(dps_[1]->counters().handoffs_received.get(), dps_[0]->counters().handoffs_sent.get());
    EXPECT_EQ(dps_[1]->counters().handoffs_received.get(), out[1].size());
    // Counted once, by the worker that took them off the port.
    EXPECT_EQ(sum(0, &PortCounters::rx_packets), static_cast<uint64_t>(kFlows));
    EXPECT_EQ(dps_[1]->port_counters(0).rx_packets.get(), 0u);
    EXPECT_EQ(sum(1, &PortCounters::tx_packets), static_cast<uint64_t>(kFlows));
}

TEST_F(WorkersTest, RepliesOnEitherQueueReachTheSessionsWorkerAndLaterPacketsKeepTheirSession) {
    for (int i = 0; i < kFlows; ++i) receive(0, 0, syn(static_cast<uint16_t>(41000 + i)));
    settle();
    (void)sent(1);  // the SYNs; the data packets below say which session port each flow got
    std::map<uint16_t, uint16_t> session_of_node_port;  // node port -> session port

    // Data from each node flow, now arriving on queue 1: steered to the worker that holds it.
    for (int i = 0; i < kFlows; ++i)
        receive(0, 1,
                PacketBuilder().eth(gw_in_, kNodeMac).ipv4(kNode, kInternalAddr, 64, 2)
                    .tcp(static_cast<uint16_t>(41000 + i), kImportTcpPort, kAck, 101 + static_cast<uint32_t>(i)).build());
    settle();
    EXPECT_EQ(dps_[0]->nat_counters().sessions_created.get() + dps_[1]->nat_counters().sessions_created.get(), static_cast<uint64_t>(kFlows))
        << "a later packet of a flow opened a second session";
    const uint64_t fast_after_data = fast_path();
    std::vector<uint16_t> session_ports;
    for (const auto& q : sent(1))
        for (const auto& f : q) {
            const uint32_t seq = static_cast<uint32_t>(f[38] << 24 | f[39] << 16 | f[40] << 8 | f[41]);
            session_of_node_port[static_cast<uint16_t>(41000 + seq - 101)] = be16_at(f, 14 + 20);
            session_ports.push_back(be16_at(f, 14 + 20));
        }
    ASSERT_EQ(session_of_node_port.size(), static_cast<std::size_t>(kFlows));

    // The peer answers each flow, all on queue 0 of the external port: half belong to worker 1.
    for (const auto& [node_port, session_port] : session_of_node_port)
        receive(1, 0,
                PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, 3)
                    .tcp(kPeerTcpPort, session_port, kAck, 5000 + node_port).build());
    const uint64_t handed_before = dps_[0]->counters().handoffs_sent.get();
    settle();
    std::size_t back = 0;
    const auto replies = sent(0);
    for (uint16_t q = 0; q < kWorkers; ++q)
        for (const auto& f : replies[q]) {
            const uint16_t node_port = be16_at(f, 14 + 20 + 2);
            const uint32_t seq = static_cast<uint32_t>(f[38] << 24 | f[39] << 16 | f[40] << 8 | f[41]);
            EXPECT_EQ(seq, 5000u + node_port) << "a reply reached the wrong node port";
            EXPECT_EQ(session_of_node_port.at(node_port) % kWorkers, q) << "sent by a worker that does not hold the session";
            ++back;
        }
    EXPECT_EQ(back, static_cast<std::size_t>(kFlows));
    std::size_t worker1_ports = 0;
    for (const uint16_t p : session_ports) worker1_ports += p % kWorkers == 1;
    EXPECT_EQ(dps_[0]->counters().handoffs_sent.get() - handed_before, worker1_ports);
    // Worker 1 took its own flows' data off queue 1 on the established-flow path; worker 0's came
    // to it as hand-offs, on the full path. Every first reply took the full path (it marks the
    // session established).
    EXPECT_EQ(fast_after_data, worker1_ports);
    EXPECT_EQ(dps_[0]->nat_counters().fast_path.get(), 0u);
    EXPECT_EQ(fast_path(), fast_after_data);
    EXPECT_EQ(sum(0, &PortCounters::tx_packets), static_cast<uint64_t>(kFlows));
    EXPECT_EQ(sum(1, &PortCounters::rx_packets), static_cast<uint64_t>(kFlows));
    uint64_t drops = 0;
    for (const auto& dp : dps_)
        for (int p = 0; p < 2; ++p) drops += dp->port_counters(p).total_drops();
    EXPECT_EQ(drops, 0u);
    // The peer's second packets, again all on queue 0: worker 0's own on the fast path, worker 1's
    // handed off to it.
    for (const auto& [node_port, session_port] : session_of_node_port)
        receive(1, 0,
                PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, 4)
                    .tcp(kPeerTcpPort, session_port, kAck, 6000 + node_port).build());
    settle();
    std::size_t second = 0;
    for (const auto& q : sent(0)) second += q.size();
    EXPECT_EQ(second, static_cast<std::size_t>(kFlows));
    EXPECT_EQ(dps_[0]->nat_counters().fast_path.get(), kFlows - worker1_ports);
    EXPECT_EQ(fast_path(), static_cast<uint64_t>(kFlows));
}

// An established flow's packets on the owner's queue take the established-flow path and leave
// exactly as built from scratch: addresses, ports, TTL, both checksums, and the neighbours' MACs.
TEST_F(WorkersTest, AnEstablishedFlowsPacketsLeaveTheFastPathExactlyAsBuiltFromScratch) {
    constexpr uint16_t kNodePort = 41007;
    const uint16_t port = establish(kNodePort);
    ASSERT_FALSE(HasFailure());
    const uint16_t w = port % kWorkers;
    ASSERT_EQ(fast_path(), 0u) << "a SYN and the first reply take the full path";

    receive(0, w, PacketBuilder().eth(gw_in_, kNodeMac).ipv4(kNode, kInternalAddr, 64, 8)
                      .tcp(kNodePort, kImportTcpPort, kPsh | kAck, 101).payload(37, 3).build());
    settle();
    const auto out = sent(1);
    ASSERT_EQ(out[w].size(), 1u);
    EXPECT_EQ(out[w][0], PacketBuilder().eth(kPeerMac, gw_ext_).ipv4(kExternalAddr, kPeer, 63, 8)
                             .tcp(port, kPeerTcpPort, kPsh | kAck, 101).payload(37, 3).build());
    EXPECT_EQ(dps_[w]->nat_counters().fast_path.get(), 1u);

    receive(1, w, PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, 9)
                      .tcp(kPeerTcpPort, port, kAck, 9001).payload(64, 5).build());
    settle();
    const auto back = sent(0);
    ASSERT_EQ(back[w].size(), 1u);
    EXPECT_EQ(back[w][0], PacketBuilder().eth(kNodeMac, gw_in_).ipv4(kInternalAddr, kNode, 63, 9)
                              .tcp(kImportTcpPort, kNodePort, kAck, 9001).payload(64, 5).build());
    EXPECT_EQ(dps_[w]->nat_counters().fast_path.get(), 2u);
    EXPECT_EQ(fast_path(), 2u);
    EXPECT_EQ(dps_[w]->nat_counters().translated.get(), 4u);
}

// The established-flow path keeps the last packet's next hop for the packets after it in the burst.
// Replies of two sessions toward two nodes, interleaved in one burst with a peer's ARP request among
// them (the full path's, which makes the next packet look its hop up again): every packet leaves
// with its own node's MAC, in order, all of them on the established-flow path.
TEST_F(WorkersTest, OneBurstToTwoNextHopsGivesEachPacketItsOwnHopsMac) {
    struct Flow {
        const char* node;
        Mac mac;
        uint16_t node_port = 0, port = 0;
    };
    Flow flows[2] = {{kNode, kNodeMac}, {kThirdNode, kThirdNodeMac}};
    uint16_t w = kWorkers;
    uint16_t next_port = 42000;
    for (Flow& f : flows) {
        // A session whose port is worker w's (the first one's decides w).
        while (f.port == 0 && next_port < 42100) {
            const uint16_t np = next_port++;
            receive(0, 0, PacketBuilder().eth(gw_in_, f.mac).ipv4(f.node, kInternalAddr, 64, 1).tcp(np, kImportTcpPort, kSyn, 100).build());
            settle();
            uint16_t port = 0;
            for (const auto& q : sent(1))
                for (const auto& frame : q) port = be16_at(frame, 14 + 20);
            ASSERT_NE(port, 0u);
            if (w == kWorkers) w = port % kWorkers;
            if (port % kWorkers == w) f.node_port = np, f.port = port;
        }
        ASSERT_NE(f.port, 0u) << "no session of " << f.node << " on worker " << w;
        receive(1, w, PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, 7).tcp(kPeerTcpPort, f.port, kSyn | kAck, 9000).build());
        settle();
        ASSERT_EQ(sent(0)[w].size(), 1u);
    }
    const auto reply = [&](const Flow& f, uint16_t id) {
        return PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, id).tcp(kPeerTcpPort, f.port, kAck, 9001).payload(16, static_cast<uint8_t>(id)).build();
    };
    const auto delivered = [&](const Flow& f, uint16_t id) {
        return PacketBuilder().eth(f.mac, gw_in_).ipv4(kInternalAddr, f.node, 63, id).tcp(kImportTcpPort, f.node_port, kAck, 9001).payload(16, static_cast<uint8_t>(id)).build();
    };
    const uint64_t fast_before = dps_[w]->nat_counters().fast_path.get();
    const int order[] = {0, 1, 1, -1, 0, 1, 0};  // -1: the ARP request
    for (uint16_t i = 0; i < std::size(order); ++i)
        receive(1, w, order[i] < 0 ? PacketBuilder().eth(Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, kPeerMac)
                                         .arp(1, kPeerMac, kPeer, Mac{}, kExternalAddr).build()
                                   : reply(flows[order[i]], static_cast<uint16_t>(20 + i)));
    ASSERT_EQ(dps_[w]->poll_once(), std::size(order)) << "one burst";
    settle();
    const auto out = sent(0);
    ASSERT_EQ(out[w].size(), std::size(order) - 1);
    std::size_t k = 0;
    for (uint16_t i = 0; i < std::size(order); ++i) {
        if (order[i] < 0) continue;
        EXPECT_EQ(out[w][k++], delivered(flows[order[i]], static_cast<uint16_t>(20 + i))) << "packet " << i;
    }
    EXPECT_EQ(dps_[w]->nat_counters().fast_path.get() - fast_before, std::size(order) - 1);
    const auto answered = sent(1);
    ASSERT_EQ(answered[w].size(), 1u);  // the ARP request's reply, from the worker that took it in
    EXPECT_EQ(be16_at(answered[w][0], 12), 0x0806);
}

// The established-flow path makes the full path's checks before the NAT: a session's own packet
// to another MAC, or from a group or zero MAC, is dropped under the full path's reason and never
// translated; to the broadcast MAC it is taken, as the full path takes it.
TEST_F(WorkersTest, AnEstablishedFlowsPacketFailingTheL2ChecksIsDroppedNotForwarded) {
    constexpr uint16_t kNodePort = 41009;
    const uint16_t port = establish(kNodePort);
    ASSERT_FALSE(HasFailure());
    const uint16_t w = port % kWorkers;

    const auto data = [&](const Mac& dst, const Mac& src) {
        return PacketBuilder().eth(dst, src).ipv4(kNode, kInternalAddr, 64, 8).tcp(kNodePort, kImportTcpPort, kAck, 101).payload(8).build();
    };
    const Mac other{0x02, 0, 0, 0, 9, 9}, group{0x03, 0, 0, 0, 1, 0x0a}, zero{};
    const struct {
        const char* name;
        std::vector<uint8_t> frame;
        DropReason reason;
    } cases[] = {
        {"to another MAC", data(other, kNodeMac), DropReason::l2_not_for_us},
        {"from a group MAC", data(gw_in_, group), DropReason::l2_bad_source},
        {"from the broadcast MAC", data(gw_in_, test::kBroadcast), DropReason::l2_bad_source},
        {"from the zero MAC", data(gw_in_, zero), DropReason::l2_bad_source},
    };
    const uint64_t translated = dps_[w]->nat_counters().translated.get();
    for (const auto& c : cases) {
        const uint64_t before = sum(0, &PortCounters::rx_packets) - dps_[w]->port_counters(0).total_drops();
        const uint64_t dropped = dps_[w]->port_counters(0).drops[static_cast<std::size_t>(c.reason)].get();
        receive(0, w, c.frame);
        settle();
        EXPECT_EQ(dps_[w]->port_counters(0).drops[static_cast<std::size_t>(c.reason)].get(), dropped + 1) << c.name;
        EXPECT_EQ(sum(0, &PortCounters::rx_packets) - dps_[w]->port_counters(0).total_drops(), before) << c.name;
        EXPECT_TRUE(sent(1)[w].empty()) << c.name;
    }
    EXPECT_EQ(dps_[w]->nat_counters().translated.get(), translated);
    EXPECT_EQ(fast_path(), 0u);

    receive(0, w, data(test::kBroadcast, kNodeMac));
    settle();
    EXPECT_EQ(sent(1)[w].size(), 1u);
    EXPECT_EQ(fast_path(), 1u);
}

TEST_F(WorkersTest, OwnerOfASessionPortIsItsSliceAndOfAFlowTheSameWorkerEveryTime) {
    const auto frame = [&](uint16_t sport, uint16_t dport) {
        return PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, 3).tcp(sport, dport, kAck).build();
    };
    for (uint16_t port : {20000, 20001, 33333, 59999}) {
        const auto f = frame(kPeerTcpPort, port);
        ParsedPacket p;
        ASSERT_EQ(parse_packet(f.data(), static_cast<uint32_t>(f.size()), p), DropReason::none);
        for (const auto& dp : dps_) EXPECT_EQ(dp->owner_of(f.data(), 1, p), port % kWorkers) << port;
    }
    std::set<uint16_t> owners;
    for (uint16_t sport = 1000; sport < 1064; ++sport) {
        const auto f = frame(sport, kExportTcpPort);  // a mapped port: the flow's hash decides
        ParsedPacket p;
        ASSERT_EQ(parse_packet(f.data(), static_cast<uint32_t>(f.size()), p), DropReason::none);
        const uint16_t o = dps_[0]->owner_of(f.data(), 1, p);
        EXPECT_EQ(dps_[1]->owner_of(f.data(), 1, p), o);
        owners.insert(o);
    }
    EXPECT_EQ(owners.size(), static_cast<std::size_t>(kWorkers)) << "64 flows all hashed to one worker";
}

TEST_F(WorkersTest, AnArpReplyTakenInByOneWorkerTeachesEveryWorker) {
    receive(0, 1,
            PacketBuilder().eth(gw_in_, kOtherNodeMac).arp(2, kOtherNodeMac, "198.18.1.11", gw_in_, kInternalAddr).build());
    settle();
    EXPECT_EQ(dps_[1]->counters().arp_copies_sent.get() + dps_[0]->counters().arp_copies_sent.get(), 1u);
    EXPECT_EQ(dps_[0]->counters().neigh_learned.get(), 1u);
    EXPECT_EQ(dps_[1]->counters().neigh_learned.get(), 1u);
    EXPECT_EQ(sum(0, &PortCounters::rx_packets), 1u);
}

TEST_F(WorkersTest, AFullHandOffRingIsACountedDrop) {
    // Worker 1 never polls: its ring (1024) fills, and the rest is dropped under its reason.
    constexpr int kMany = 3000;
    for (int round = 0; round < kMany / 400; ++round) {
        for (int i = 0; i < 400; ++i)
            receive(1, 0,
                    PacketBuilder().eth(gw_ext_, kPeerMac).ipv4(kPeer, kExternalAddr, 64, 3)
                        .tcp(kPeerTcpPort, 20001, kAck).build());  // session port of worker 1
        while (dps_[0]->poll_once() != 0) {
        }
    }
    const uint64_t handed = dps_[0]->counters().handoffs_sent.get();
    const uint64_t full = dps_[0]->port_counters(1).drops[static_cast<std::size_t>(DropReason::handoff_ring_full)].get();
    EXPECT_EQ(handed, rte_ring_count(handoff_[1]));
    EXPECT_GT(full, 0u);
    EXPECT_EQ(handed + full, static_cast<uint64_t>(kMany / 400 * 400));
}

}  // namespace
}  // namespace fedgate
