// The handshake relay, two gateways back to back in one process (each HandshakeRelay over a test
// RelayIo that delivers peer messages to the other, and records what each compute process gets),
// and AutoMappings against a real PortMapTable: exports made on registration, imports on first
// use, both gone when their processes leave, none of them in the state file.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <stdlib.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "controlplane/auto_mapping.hpp"
#include "controlplane/config.hpp"
#include "controlplane/handshake_relay.hpp"
#include "dataplane/portmap.hpp"
#include "tests/support/alpha_config.hpp"

namespace {

using namespace fedgate;

constexpr uint16_t kA = 1, kB = 2;
const ProcessId kAlice = ProcessId::make(kA, 3, 100);  // a process of party A
const ProcessId kBob = ProcessId::make(kB, 7, 42);     // a process of party B
const ProcessId kCarol = ProcessId::make(kA, 4, 5);    // another process of party A
constexpr Endpoint4 kAliceCtl{0xC6120103, 40001};     // 198.18.1.3
constexpr Endpoint4 kBobCtl{0xC6120207, 40002};       // 198.18.2.7
constexpr Endpoint4 kCarolCtl{0xC6120104, 40003};
constexpr Endpoint4 kAInternal{0xC6120101, 0}, kBExternal{0xC6130002, 0};
constexpr uint32_t kAExternal = 0xC6130001, kBInternal = 0xC6120201;  // 198.19.0.1, 198.18.2.1

struct Sent {
    Endpoint4 dst;
    MsgType type;
    ConnParams p;
};

// One gateway's world: its registered processes, its peer (the other test gateway), the
// mappings it would hand out, and everything it sent to its processes.
class TestIo : public RelayIo {
public:
    std::map<uint64_t, Endpoint4> procs;
    HandshakeRelay* peer_relay = nullptr;
    uint16_t peer_party = 0, own_party = 0;
    int drop_peer_msgs = 0;  // the next N messages to the peer are lost
    std::optional<uint16_t> export_port = 61000, import_port = 61500;
    std::vector<Sent> to_procs;
    std::vector<std::tuple<uint16_t, ProcessId, ProcessId>> imports_asked;  // peer_port, target, initiator
    uint64_t now = 0;
    // RDMA: virtual QPNs handed out from a counter, `vqpns_free` of them; what was installed.
    uint32_t own_internal = 0, own_external = 0, peer_external = 0;
    uint32_t vqpns_free = 16, next_vqpn = 0x100;
    uint16_t mtu_limit = 1024;
    std::vector<std::pair<RoceSide, uint32_t>> reserved, released;
    std::vector<RoceConn> installed;

    std::optional<uint32_t> roce_reserve(RoceSide side) override {
        if (vqpns_free == 0) return std::nullopt;
        --vqpns_free;
        reserved.emplace_back(side, ++next_vqpn);
        return next_vqpn;
    }
    void roce_release(RoceSide side, uint32_t vqpn) override {
        ++vqpns_free;
        released.emplace_back(side, vqpn);
    }
    bool roce_install(const RoceConn& c) override {
        installed.push_back(c);
        return true;
    }
    uint32_t own_address(RoceSide side) override { return side == RoceSide::internal ? own_internal : own_external; }
    uint32_t peer_address(uint16_t party) override { return party == peer_party ? peer_external : 0; }
    uint16_t rdma_mtu_limit() override { return mtu_limit; }

    std::optional<Endpoint4> control_endpoint(ProcessId pid) override {
        const auto it = procs.find(pid.value);
        if (it == procs.end()) return std::nullopt;
        return it->second;
    }
    bool has_peer(uint16_t party) override { return party == peer_party; }
    void to_process(Endpoint4 dst, MsgType type, const ConnParams& p) override { to_procs.push_back({dst, type, p}); }
    void to_peer(uint16_t party, MsgType type, const ConnParams& p) override {
        ASSERT_EQ(party, peer_party);
        if (drop_peer_msgs > 0) {
            --drop_peer_msgs;
            return;
        }
        peer_relay->on_peer(type, own_party, p, now);
    }
    std::optional<Endpoint4> exported_endpoint(ProcessId) override {
        if (!export_port) return std::nullopt;
        return Endpoint4{kBExternal.addr, *export_port};
    }
    std::optional<Endpoint4> imported_endpoint(uint16_t, uint16_t peer_port, ProcessId target, ProcessId initiator) override {
        imports_asked.emplace_back(peer_port, target, initiator);
        if (!import_port) return std::nullopt;
        return Endpoint4{kAInternal.addr, *import_port};
    }
    // The last message a process got, of a type.
    std::optional<Sent> last(MsgType t, Endpoint4 dst) const {
        for (auto it = to_procs.rbegin(); it != to_procs.rend(); ++it)
            if (it->type == t && it->dst.addr == dst.addr && it->dst.port == dst.port) return *it;
        return std::nullopt;
    }
    std::size_t count(MsgType t) const {
        return static_cast<std::size_t>(std::count_if(to_procs.begin(), to_procs.end(), [&](const Sent& s) { return s.type == t; }));
    }
};

ConnParams req(uint64_t id, ProcessId from = kAlice, ProcessId to = kBob) {
    ConnParams p;
    p.conn_id = id;
    p.initiator = from;
    p.target = to;
    p.caps = kCapAll;
    p.qpn = 0x123;
    p.psn = 0xabcdef;
    p.mtu = 4096;
    p.gid = ipv4_gid(kAliceCtl.addr);  // Alice's RoCE address is her node's
    return p;
}

ConnParams rep_rdma(const ConnParams& r) {
    ConnParams p = r;
    p.caps = kCapRdma;
    p.qpn = 0x4567;
    p.psn = 0x10;
    p.mtu = 2048;
    p.gid = ipv4_gid(kBobCtl.addr);
    p.rkey = 77;
    p.raddr = 0x1000;
    p.rlen = 4096;
    return p;
}

// The fields a gateway leaves alone.
void expect_same_ids(const ConnParams& got, const ConnParams& want) {
    EXPECT_EQ(got.conn_id, want.conn_id);
    EXPECT_EQ(got.initiator, want.initiator);
    EXPECT_EQ(got.target, want.target);
    EXPECT_EQ(got.caps, want.caps);
    EXPECT_EQ(got.psn, want.psn);
}

ConnParams rep_tcp(const ConnParams& r) {
    ConnParams p = r;
    p.caps = kCapTcp;
    p.qpn = p.psn = p.mtu = 0;
    p.ipv4 = kBobCtl.addr;  // the target's private endpoint
    p.port = 5201;
    return p;
}

class RelayPair : public ::testing::Test {
protected:
    void SetUp() override {
        settings.handshake_timeout_ms = 1000;
        settings.max_handshakes = 8;
        a_io.own_party = kA;
        a_io.peer_party = kB;
        b_io.own_party = kB;
        b_io.peer_party = kA;
        a_io.own_internal = kAInternal.addr;
        a_io.own_external = kAExternal;
        a_io.peer_external = kBExternal.addr;
        b_io.own_internal = kBInternal;
        b_io.own_external = kBExternal.addr;
        b_io.peer_external = kAExternal;
        a_io.procs[kAlice.value] = kAliceCtl;
        a_io.procs[kCarol.value] = kCarolCtl;
        b_io.procs[kBob.value] = kBobCtl;
        a = std::make_unique<HandshakeRelay>(kA, settings, a_io);
        b = std::make_unique<HandshakeRelay>(kB, settings, b_io);
        a_io.peer_relay = b.get();
        b_io.peer_relay = a.get();
    }
    void at(uint64_t t) { a_io.now = b_io.now = t; }
    std::string stage_of(const HandshakeRelay& r, uint64_t now = 0) const {
        const auto l = r.list(10, now);
        return l["handshakes"].empty() ? "" : l["handshakes"][0]["stage"].get<std::string>();
    }

    ConnectSettings settings;
    TestIo a_io, b_io;
    std::unique_ptr<HandshakeRelay> a, b;
};

TEST_F(RelayPair, HappyPathOverTcpRewritesTheEndpointTwice) {
    const ConnParams r = req(7);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    // B hands the REQ to Bob's control endpoint; only its RDMA offer is translated.
    const auto at_bob = b_io.last(MsgType::conn_req, kBobCtl);
    ASSERT_TRUE(at_bob);
    expect_same_ids(at_bob->p, r);
    EXPECT_EQ(stage_of(*a), "req_relayed");

    b->on_client(MsgType::conn_rep, kBobCtl, rep_tcp(r), 1);
    // A asked for an import of B's exported port for Alice, and Alice got A's internal address and
    // the imported port, not Bob's private endpoint.
    ASSERT_EQ(a_io.imports_asked.size(), 1u);
    EXPECT_EQ(std::get<0>(a_io.imports_asked[0]), 61000);
    EXPECT_EQ(std::get<1>(a_io.imports_asked[0]), kBob);
    EXPECT_EQ(std::get<2>(a_io.imports_asked[0]), kAlice);
    const auto at_alice = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(at_alice);
    EXPECT_EQ(at_alice->p.status, ConnStatus::ok);
    EXPECT_EQ(at_alice->p.caps, kCapTcp);
    EXPECT_EQ(at_alice->p.ipv4, kAInternal.addr);
    EXPECT_EQ(at_alice->p.port, 61500);
    EXPECT_EQ(stage_of(*a), "rep_relayed");

    a->on_client(MsgType::conn_rtu, kAliceCtl, r, 2);
    EXPECT_TRUE(b_io.last(MsgType::conn_rtu, kBobCtl));
    EXPECT_EQ(stage_of(*a), "established");
    EXPECT_EQ(stage_of(*b), "established");
    EXPECT_EQ(a->counters().established, 1u);
    EXPECT_EQ(b->counters().established, 1u);
    const auto l = a->list(10, 5);
    EXPECT_EQ(l["handshakes"][0]["role"], "outbound");
    EXPECT_EQ(l["handshakes"][0]["transport"], "tcp");
    EXPECT_EQ(b->list(10, 5)["handshakes"][0]["role"], "inbound");
}

TEST_F(RelayPair, RdmaHandshakeTellsEachNodeItsOwnGatewayAndVirtualQpns) {
    const ConnParams r = req(8);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    // Bob is told: peer = B's internal address, a vQPN of B's internal side; the PSN passes, the
    // MTU is clamped to what the ports carry.
    const auto at_bob = b_io.last(MsgType::conn_req, kBobCtl);
    ASSERT_TRUE(at_bob);
    expect_same_ids(at_bob->p, r);
    EXPECT_EQ(at_bob->p.gid, ipv4_gid(kBInternal));
    EXPECT_EQ(at_bob->p.mtu, 1024);
    ASSERT_EQ(b_io.reserved.size(), 1u);
    EXPECT_EQ(b_io.reserved[0].first, RoceSide::internal);
    EXPECT_EQ(at_bob->p.qpn, b_io.reserved[0].second);

    const ConnParams rep = rep_rdma(r);
    b->on_client(MsgType::conn_rep, kBobCtl, rep, 1);
    const auto at_alice = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(at_alice);
    expect_same_ids(at_alice->p, rep);
    EXPECT_EQ(at_alice->p.status, ConnStatus::ok);
    EXPECT_EQ(at_alice->p.gid, ipv4_gid(kAInternal.addr));
    EXPECT_EQ(at_alice->p.mtu, 1024);
    EXPECT_EQ(at_alice->p.rkey, 77u);  // the receive ring passes: RDMA WRITE addresses it on the far node
    EXPECT_EQ(at_alice->p.raddr, 0x1000u);
    ASSERT_EQ(a_io.reserved.size(), 2u);  // external at REQ, internal at REP
    EXPECT_EQ(a_io.reserved[0].first, RoceSide::external);
    EXPECT_EQ(a_io.reserved[1].first, RoceSide::internal);
    EXPECT_EQ(at_alice->p.qpn, a_io.reserved[1].second);
    EXPECT_TRUE(a_io.imports_asked.empty());
    EXPECT_TRUE(a_io.installed.empty());  // not before RTU

    a->on_client(MsgType::conn_rtu, kAliceCtl, r, 2);
    // Bob's RTU carries what Bob was told in REQ, not Alice's private QPN.
    const auto rtu = b_io.last(MsgType::conn_rtu, kBobCtl);
    ASSERT_TRUE(rtu);
    EXPECT_EQ(rtu->p.qpn, at_bob->p.qpn);
    EXPECT_EQ(rtu->p.gid, ipv4_gid(kBInternal));
    ASSERT_EQ(a_io.installed.size(), 1u);
    ASSERT_EQ(b_io.installed.size(), 1u);
    const RoceConn& ca = a_io.installed[0];
    const RoceConn& cb = b_io.installed[0];
    // A: Alice's real QPN and address behind A's external vQPN; toward B's external vQPN.
    EXPECT_EQ(ca.local, kAlice);
    EXPECT_EQ(ca.remote, kBob);
    EXPECT_EQ(ca.node_addr, kAliceCtl.addr);
    EXPECT_EQ(ca.node_qpn, 0x123u);
    EXPECT_EQ(ca.external_vqpn, a_io.reserved[0].second);
    EXPECT_EQ(ca.internal_vqpn, a_io.reserved[1].second);
    EXPECT_EQ(ca.peer_addr, kBExternal.addr);
    EXPECT_EQ(cb.local, kBob);
    EXPECT_EQ(cb.node_addr, kBobCtl.addr);
    EXPECT_EQ(cb.node_qpn, 0x4567u);
    EXPECT_EQ(cb.peer_addr, kAExternal);
    // Each gateway sends to the vQPN the other's external side handed out.
    EXPECT_EQ(ca.peer_vqpn, cb.external_vqpn);
    EXPECT_EQ(cb.peer_vqpn, ca.external_vqpn);
    EXPECT_TRUE(a_io.released.empty());
    EXPECT_TRUE(b_io.released.empty());
    EXPECT_EQ(a->counters().rdma_translated, 1u);
    // A repeated RTU installs nothing more.
    a->on_client(MsgType::conn_rtu, kAliceCtl, r, 3);
    EXPECT_EQ(a_io.installed.size(), 1u);
    EXPECT_EQ(b_io.installed.size(), 1u);
}

TEST_F(RelayPair, RdmaWithNoVirtualQpnLeftIsRefusedNoMapping) {
    a_io.vqpns_free = 0;
    a->on_client(MsgType::conn_req, kAliceCtl, req(20), 0);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::no_mapping);
    EXPECT_EQ(b_io.count(MsgType::conn_req), 0u);
    // The target's gateway out of vQPNs refuses too, and A gives its reservation back.
    a_io.vqpns_free = 16;
    b_io.vqpns_free = 0;
    a->on_client(MsgType::conn_req, kAliceCtl, req(21), 0);
    const auto again = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->p.status, ConnStatus::no_mapping);
    EXPECT_EQ(a_io.released.size(), 1u);
    EXPECT_EQ(a_io.vqpns_free, 16u);
}

TEST_F(RelayPair, TcpChosenOrTimedOutGivesTheVirtualQpnsBack) {
    const ConnParams r = req(30);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    b->on_client(MsgType::conn_rep, kBobCtl, rep_tcp(r), 1);
    EXPECT_EQ(b_io.released.size(), 1u);  // B's internal vQPN
    EXPECT_EQ(a_io.released.size(), 1u);  // A's external vQPN
    EXPECT_EQ(a_io.vqpns_free, 16u);
    EXPECT_EQ(b_io.vqpns_free, 16u);

    a->on_client(MsgType::conn_req, kAliceCtl, req(31), 10);
    EXPECT_EQ(a_io.vqpns_free, 15u);
    a->expire(10 + settings.handshake_timeout_ms);
    b->expire(10 + settings.handshake_timeout_ms);
    EXPECT_EQ(a_io.vqpns_free, 16u);
    EXPECT_EQ(b_io.vqpns_free, 16u);
}

TEST_F(RelayPair, RdmaOfferWithoutAnIpv4GidIsNarrowedToTcpOrRefused) {
    ConnParams r = req(40);
    r.gid = {};
    r.gid[0] = 0xfe, r.gid[1] = 0x80;  // link-local: nothing the gateways route
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    const auto at_bob = b_io.last(MsgType::conn_req, kBobCtl);
    ASSERT_TRUE(at_bob);
    EXPECT_EQ(at_bob->p.caps, kCapTcp);
    EXPECT_EQ(a->counters().rdma_unmapped_gid, 1u);
    r.conn_id = 41;
    r.caps = kCapRdma;
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::bad_request);
}

TEST_F(RelayPair, ALocalRdmaHandshakeIsNotTranslated) {
    const ConnParams r = req(50, kAlice, kCarol);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    const auto at_carol = a_io.last(MsgType::conn_req, kCarolCtl);
    ASSERT_TRUE(at_carol);
    EXPECT_EQ(at_carol->p, r);
    EXPECT_TRUE(a_io.reserved.empty());
}

TEST_F(RelayPair, UnregisteredOrMisplacedInitiatorIsRefused) {
    const ProcessId stranger = ProcessId::make(kA, 9, 9);
    a->on_client(MsgType::conn_req, Endpoint4{0xC6120109, 1}, req(1, stranger), 0);
    auto got = a_io.last(MsgType::conn_rep, Endpoint4{0xC6120109, 1});
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::unknown_initiator);
    // Alice's ID from another node's address.
    a->on_client(MsgType::conn_req, Endpoint4{0xC6120109, 2}, req(2), 0);
    got = a_io.last(MsgType::conn_rep, Endpoint4{0xC6120109, 2});
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::unknown_initiator);
    EXPECT_EQ(b_io.count(MsgType::conn_req), 0u);
    EXPECT_EQ(a->counters().refused[static_cast<int>(ConnStatus::unknown_initiator)], 2u);
}

TEST_F(RelayPair, UnknownTargetIsRefusedByItsGatewayAndListed) {
    a->on_client(MsgType::conn_req, kAliceCtl, req(3, kAlice, ProcessId::make(kB, 1, 1)), 0);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::unknown_target);
    EXPECT_EQ(stage_of(*a), "refused");
    EXPECT_EQ(a->list(10, 0)["handshakes"][0]["status"], "unknown_target");
    EXPECT_EQ(b->counters().refused[static_cast<int>(ConnStatus::unknown_target)], 1u);
}

TEST_F(RelayPair, NoPeerForTheTargetsParty) {
    a->on_client(MsgType::conn_req, kAliceCtl, req(4, kAlice, ProcessId::make(5, 1, 1)), 0);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::no_peer);
}

TEST_F(RelayPair, TargetRefusalTravelsBack) {
    const ConnParams r = req(5);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    ConnParams no = r;
    no.status = ConnStatus::not_listening;
    no.caps = 0;
    b->on_client(MsgType::conn_rep, kBobCtl, no, 1);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::not_listening);
    EXPECT_EQ(stage_of(*a), "refused");
    // An RTU for a refused handshake goes nowhere.
    a->on_client(MsgType::conn_rtu, kAliceCtl, r, 2);
    EXPECT_EQ(b_io.count(MsgType::conn_rtu), 0u);
    EXPECT_EQ(a->counters().unknown_handshake, 1u);
}

TEST_F(RelayPair, LostReqIsRelayedAgainOnRetry) {
    a_io.drop_peer_msgs = 1;
    const ConnParams r = req(6);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    EXPECT_EQ(b_io.count(MsgType::conn_req), 0u);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 300);  // Alice's retry
    EXPECT_EQ(b_io.count(MsgType::conn_req), 1u);
    EXPECT_EQ(a->counters().duplicates, 1u);
}

TEST_F(RelayPair, LostRepIsAnsweredFromTheSavedRepWithoutAskingTheTargetAgain) {
    const ConnParams r = req(9);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    b_io.drop_peer_msgs = 1;  // B's hs_rep is lost
    b->on_client(MsgType::conn_rep, kBobCtl, rep_tcp(r), 1);
    EXPECT_EQ(a_io.count(MsgType::conn_rep), 0u);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 300);  // Alice retries
    EXPECT_EQ(b_io.count(MsgType::conn_req), 1u) << "B answers from the REP it kept; Bob is not asked twice";
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.port, 61500);
    // And a REQ repeated after Alice has her REP: answered by A itself.
    a->on_client(MsgType::conn_req, kAliceCtl, r, 400);
    EXPECT_EQ(a_io.count(MsgType::conn_rep), 2u);
    EXPECT_EQ(b_io.count(MsgType::conn_req), 1u);
}

TEST_F(RelayPair, ForgedPeerHandshakesAreRefusedOrIgnored) {
    // B claims a handshake for one of party 3's processes.
    b->on_peer(MsgType::hs_req, kA, req(10, ProcessId::make(3, 1, 1), kBob), 0);
    EXPECT_EQ(b_io.count(MsgType::conn_req), 0u);
    EXPECT_EQ(b->counters().refused[static_cast<int>(ConnStatus::wrong_party)], 1u);
    // B's refusal went back to A, which never asked: dropped and counted.
    EXPECT_EQ(a->counters().unknown_handshake, 1u);
    // A REP from a peer for a handshake A never relayed.
    a->on_peer(MsgType::hs_rep, kB, rep_tcp(req(11)), 0);
    EXPECT_EQ(a_io.count(MsgType::conn_rep), 0u);
    EXPECT_EQ(a->counters().unknown_handshake, 2u);
    // A REP from a process that is not the target.
    a->on_client(MsgType::conn_req, kAliceCtl, req(12), 0);
    b->on_client(MsgType::conn_rep, Endpoint4{0xC6120299, 1}, rep_tcp(req(12)), 1);
    EXPECT_EQ(a_io.count(MsgType::conn_rep), 0u);
    EXPECT_EQ(b->counters().wrong_sender, 1u);
}

TEST_F(RelayPair, NoFreePortMeansNoMapping) {
    b_io.export_port.reset();
    const ConnParams r = req(13);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    b->on_client(MsgType::conn_rep, kBobCtl, rep_tcp(r), 1);
    auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::no_mapping);

    b_io.export_port = 61000;
    a_io.import_port.reset();
    const ConnParams r2 = req(14);
    a->on_client(MsgType::conn_req, kAliceCtl, r2, 0);
    b->on_client(MsgType::conn_rep, kBobCtl, rep_tcp(r2), 1);
    got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.conn_id, 14u);
    EXPECT_EQ(got->p.status, ConnStatus::no_mapping);
}

TEST_F(RelayPair, UnansweredHandshakesTimeOutAndFinishedOnesLeave) {
    a_io.drop_peer_msgs = 100;
    a->on_client(MsgType::conn_req, kAliceCtl, req(15), 0);
    a->expire(999);
    EXPECT_EQ(stage_of(*a, 999), "req_relayed");
    a->expire(1000);
    EXPECT_EQ(stage_of(*a, 1000), "timed_out");
    EXPECT_EQ(a->counters().timed_out, 1u);
    a->expire(1999);
    EXPECT_EQ(a->size(), 1u);
    a->expire(2000);
    EXPECT_EQ(a->size(), 0u);
}

// A REQ retried after its handshake timed out (the gateway gave its vQPNs back then) starts over
// with a fresh reservation instead of sending the released vQPN again, which another connection
// may hold by now.
TEST_F(RelayPair, ARetryAfterATimeoutStartsOverWithFreshVirtualQpns) {
    a_io.drop_peer_msgs = 1;
    const ConnParams r = req(16);
    const uint64_t t = settings.handshake_timeout_ms;
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    ASSERT_EQ(a_io.reserved.size(), 1u);
    const uint32_t released = a_io.reserved[0].second;
    a->expire(t);
    EXPECT_EQ(stage_of(*a, t), "timed_out");
    ASSERT_EQ(a_io.released.size(), 1u);
    EXPECT_EQ(a_io.released[0].second, released);
    // Alice retries the same connection: a new handshake, with a vQPN of its own.
    a->on_client(MsgType::conn_req, kAliceCtl, r, t + 1);
    EXPECT_EQ(a->counters().duplicates, 0u);
    ASSERT_EQ(a_io.reserved.size(), 2u);
    const uint32_t fresh = a_io.reserved[1].second;
    EXPECT_NE(fresh, released);
    EXPECT_EQ(stage_of(*a, t + 1), "req_relayed");
    // Bob answers and Alice confirms: B sends toward the fresh vQPN, not the released one.
    const auto at_bob = b_io.last(MsgType::conn_req, kBobCtl);
    ASSERT_TRUE(at_bob);
    b->on_client(MsgType::conn_rep, kBobCtl, rep_rdma(r), t + 2);
    a->on_client(MsgType::conn_rtu, kAliceCtl, r, t + 3);
    ASSERT_EQ(b_io.installed.size(), 1u);
    EXPECT_EQ(b_io.installed[0].peer_vqpn, fresh);
    ASSERT_EQ(a_io.installed.size(), 1u);
    EXPECT_EQ(a_io.installed[0].external_vqpn, fresh);
}

TEST_F(RelayPair, AFullTableRefusesBusy) {
    a_io.drop_peer_msgs = 100;
    for (uint64_t i = 1; i <= settings.max_handshakes; ++i) a->on_client(MsgType::conn_req, kAliceCtl, req(100 + i), 0);
    a->on_client(MsgType::conn_req, kAliceCtl, req(999), 0);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::busy);
    EXPECT_EQ(a->size(), settings.max_handshakes);
}

TEST_F(RelayPair, BothProcessesLocalGoStraightThroughWithoutMappings) {
    const ConnParams r = req(16, kAlice, kCarol);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    ASSERT_TRUE(a_io.last(MsgType::conn_req, kCarolCtl));
    ConnParams rep = rep_tcp(r);
    rep.ipv4 = kCarolCtl.addr;
    a->on_client(MsgType::conn_rep, kCarolCtl, rep, 1);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.ipv4, kCarolCtl.addr) << "no gateway between them: the private endpoint works";
    EXPECT_EQ(got->p.port, 5201);
    a->on_client(MsgType::conn_rtu, kAliceCtl, r, 2);
    EXPECT_TRUE(a_io.last(MsgType::conn_rtu, kCarolCtl));
    EXPECT_EQ(a->list(10, 3)["handshakes"][0]["role"], "local");
    EXPECT_EQ(stage_of(*a, 3), "established");
}

TEST_F(RelayPair, MalformedRepWithSeveralTransportsIsRefused) {
    const ConnParams r = req(17);
    a->on_client(MsgType::conn_req, kAliceCtl, r, 0);
    ConnParams rep = rep_tcp(r);
    rep.caps = kCapAll;  // a REP must name the one transport chosen
    b->on_client(MsgType::conn_rep, kBobCtl, rep, 1);
    const auto got = a_io.last(MsgType::conn_rep, kAliceCtl);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->p.status, ConnStatus::bad_request);
}

// ---------------------------------------------------------------------------------------------
// Automatic mappings on a real port-map table.

class AutoMappingTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/fedgate-auto-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir = tmpl;
        cfg = parse_config(test::kAlphaConfig, "auto.toml");
        table = std::make_unique<PortMapTable>(cfg, view, nullptr, dir + "/mappings.json");
        table->load(nullptr);
        autos = std::make_unique<AutoMappings>(cfg, *table);
    }
    void TearDown() override { std::filesystem::remove_all(dir); }
    static DmaAddress tcp_record(ProcessId pid, uint32_t ip, uint16_t port) {
        DmaAddress r;
        r.pid = pid;
        r.transport = Transport::tcp;
        r.ipv4 = ip;
        r.port = port;
        return r;
    }
    std::string state_file() const {
        std::ifstream in(dir + "/mappings.json");
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

    std::string dir;
    Config cfg;
    PortMapView view;
    std::unique_ptr<PortMapTable> table;
    std::unique_ptr<AutoMappings> autos;
};

TEST_F(AutoMappingTest, ATcpProcessIsExportedWhileItLives) {
    const ProcessId p = ProcessId::make(1, 3, 1);
    autos->process_registered(tcp_record(p, 0xC612010A, 5201));
    const auto port = autos->exported_port(p);
    ASSERT_TRUE(port);
    EXPECT_GE(*port, 61000);
    EXPECT_LE(*port, 61002);
    const ExportRule* rule = view.export_rule(L4Proto::tcp, htons(*port));
    ASSERT_NE(rule, nullptr);
    EXPECT_EQ(rule->node_addr, htonl(0xC612010A));
    EXPECT_EQ(rule->node_port, htons(5201));
    const auto listed = table->list(std::nullopt)["exports"];
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0]["source"], "auto");
    EXPECT_EQ(listed[0]["cluster"], "auto");
    EXPECT_EQ(state_file().find("auto"), std::string::npos) << "automatic mappings are not persisted";
    // The same registration again keeps the port; a new endpoint moves it.
    autos->process_registered(tcp_record(p, 0xC612010A, 5201));
    EXPECT_EQ(autos->exported_port(p), port);
    autos->process_registered(tcp_record(p, 0xC612010A, 5202));
    ASSERT_TRUE(autos->exported_port(p));
    EXPECT_EQ(table->export_count(), 1u);
    autos->process_left(p);
    EXPECT_FALSE(autos->exported_port(p));
    EXPECT_EQ(table->export_count(), 0u);
    EXPECT_EQ(view.export_rule(L4Proto::tcp, htons(*port)), nullptr);
}

TEST_F(AutoMappingTest, RoceRecordsAreNotExported) {
    DmaAddress r = tcp_record(ProcessId::make(1, 3, 2), 0xC612010A, 0);
    r.transport = Transport::roce_v2;
    autos->process_registered(r);
    EXPECT_EQ(table->export_count(), 0u);
}

TEST_F(AutoMappingTest, ImportsAreSharedAndGoWithTheirLastUserOrTheirTarget) {
    const PeerConfig& beta = cfg.peers[0];
    const ProcessId target = ProcessId::make(2, 7, 42), u1 = ProcessId::make(1, 3, 1), u2 = ProcessId::make(1, 3, 2);
    const auto p1 = autos->import_port(beta, 61234, target, u1);
    const auto p2 = autos->import_port(beta, 61234, target, u2);
    ASSERT_TRUE(p1);
    EXPECT_EQ(p1, p2);
    const ImportRule* rule = view.import_rule(L4Proto::tcp, htons(*p1));
    ASSERT_NE(rule, nullptr);
    EXPECT_EQ(rule->peer_addr, htonl(0xC6130002));
    EXPECT_EQ(rule->peer_port, htons(61234));
    autos->process_left(u1);
    EXPECT_EQ(table->import_count(), 1u) << "u2 still uses it";
    autos->process_left(u2);
    EXPECT_EQ(table->import_count(), 0u);

    ASSERT_TRUE(autos->import_port(beta, 61235, target, u1));
    autos->peer_process_left(target);
    EXPECT_EQ(table->import_count(), 0u);
    EXPECT_EQ(autos->counters().imports_removed, 2u);
}

TEST_F(AutoMappingTest, TheRangeRunsOutAndIsCountedAndPortsTakenByHandAreSkipped) {
    ExportMapping by_hand;
    by_hand.cluster = "c1";
    by_hand.port = 61000;
    by_hand.node = 0xC6120120;
    by_hand.node_port = 80;
    table->add(by_hand);
    for (uint32_t i = 0; i < 3; ++i)
        autos->process_registered(tcp_record(ProcessId::make(1, 3, 10 + i), 0xC612010A, static_cast<uint16_t>(6000 + i)));
    EXPECT_EQ(autos->exported_port(ProcessId::make(1, 3, 10)), 61001);
    EXPECT_EQ(autos->exported_port(ProcessId::make(1, 3, 11)), 61002);
    EXPECT_FALSE(autos->exported_port(ProcessId::make(1, 3, 12)));
    EXPECT_EQ(autos->counters().ports_exhausted, 1u);
}

TEST_F(AutoMappingTest, AReloadKeepsAutomaticMappings) {
    autos->process_registered(tcp_record(ProcessId::make(1, 3, 1), 0xC612010A, 5201));
    table->load(nullptr);
    EXPECT_EQ(table->export_count(), 1u);
}

}  // namespace
