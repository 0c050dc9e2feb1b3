// The verbs backend (drivers/verbs.hpp) against FakeVerbs: GID choice, QP attributes as the fake's
// kernel-like rules see them, device opening errors, and the byte stream between two connections.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "proto/conn_wire.hpp"
#include "drivers/verbs.hpp"
#include "tests/support/fake_verbs.hpp"

namespace fedgate {
namespace {

using testing::FakeDevice;
using testing::FakePort;
using testing::FakeVerbs;
using testing::default_fake_device;
using testing::gid_row;
using testing::ipv4;
using testing::link_local_gid;
using testing::roce_v2_ipv4;
using Type = GidEntry::Type;

// ---- select_gid ------------------------------------------------------------------------------

TEST(VerbsSelectGid, UserIndexIsTakenWhenItIsRoceV2) {
    const std::vector<GidEntry> t = {roce_v2_ipv4(0, ipv4(10, 0, 0, 1)), roce_v2_ipv4(3, ipv4(198, 18, 0, 1))};
    RdmaOptions o;
    o.gid_index = 3;
    o.local_ipv4 = ipv4(10, 0, 0, 9);  // would pick 0 on its own
    EXPECT_EQ(select_gid(t, o, nullptr), 3u);
}

TEST(VerbsSelectGid, UserIndexThatIsMissingOrNotRoceV2IsRefusedByName) {
    const std::vector<GidEntry> t = {roce_v2_ipv4(0, ipv4(10, 0, 0, 1)),
                                     gid_row(1, Type::roce_v1, roce_v2_ipv4(0, ipv4(10, 0, 0, 1)).gid)};
    RdmaOptions o;
    std::string why;
    o.gid_index = 7;
    EXPECT_FALSE(select_gid(t, o, &why));
    EXPECT_NE(why.find("GID index 7 does not exist"), std::string::npos) << why;
    o.gid_index = 1;
    EXPECT_FALSE(select_gid(t, o, &why));
    EXPECT_EQ(why, "GID index 1 is roce_v1, not roce_v2");
}

TEST(VerbsSelectGid, SkipsLinkLocalZeroAndRoceV1) {
    const std::vector<GidEntry> t = {
        gid_row(0, Type::roce_v2, link_local_gid(1)),
        gid_row(1, Type::roce_v1, roce_v2_ipv4(0, ipv4(198, 18, 0, 1)).gid),
        gid_row(2, Type::roce_v2, {}),
        gid_row(3, Type::ib, roce_v2_ipv4(0, ipv4(198, 18, 0, 1)).gid),
        roce_v2_ipv4(5, ipv4(198, 18, 0, 1)),
    };
    EXPECT_EQ(select_gid(t, RdmaOptions{}, nullptr), 5u);
}

TEST(VerbsSelectGid, PrefersTheLocalSubnetThenTheLowestIndex) {
    const std::vector<GidEntry> t = {roce_v2_ipv4(1, ipv4(10, 1, 0, 1)), roce_v2_ipv4(4, ipv4(198, 18, 2, 7)),
                                     roce_v2_ipv4(2, ipv4(198, 18, 2, 5)), roce_v2_ipv4(6, ipv4(198, 19, 0, 1))};
    RdmaOptions o;
    o.local_ipv4 = ipv4(198, 18, 2, 1);
    EXPECT_EQ(select_gid(t, o, nullptr), 2u);
    o.prefix_len = 15;  // 198.18.0.0/15 holds 198.19.x too, still 2 is lowest
    EXPECT_EQ(select_gid(t, o, nullptr), 2u);
    o.local_ipv4 = ipv4(198, 19, 0, 9);
    o.prefix_len = 24;
    EXPECT_EQ(select_gid(t, o, nullptr), 6u);
    o.local_ipv4 = 0;  // no address given: the lowest IPv4-mapped one
    EXPECT_EQ(select_gid(t, o, nullptr), 1u);
}

TEST(VerbsSelectGid, NoneFoundSaysWhatTheTableHeld) {
    const std::vector<GidEntry> t = {gid_row(0, Type::roce_v2, link_local_gid(1)),
                                     roce_v2_ipv4(1, ipv4(10, 0, 0, 1))};
    RdmaOptions o;
    o.local_ipv4 = ipv4(198, 18, 0, 1);
    std::string why;
    EXPECT_FALSE(select_gid(t, o, &why));
    EXPECT_EQ(why,
              "no GID fits (wanted an IPv4-mapped RoCE v2 GID in 198.18.0.1/24); found: 0 fe80::1 (roce_v2, "
              "link-local); 1 ::ffff:10.0.0.1 (roce_v2)");
    EXPECT_FALSE(select_gid({}, RdmaOptions{}, &why));
    EXPECT_NE(why.find("the GID table is empty"), std::string::npos) << why;
}

TEST(VerbsMtu, BytesMapToIbvMtuAndBack) {
    EXPECT_EQ(to_ibv_mtu(256), IBV_MTU_256);
    EXPECT_EQ(to_ibv_mtu(1024), IBV_MTU_1024);
    EXPECT_EQ(to_ibv_mtu(4096), IBV_MTU_4096);
    EXPECT_FALSE(to_ibv_mtu(1500));
    EXPECT_FALSE(to_ibv_mtu(0));
    EXPECT_FALSE(to_ibv_mtu(8192));
    EXPECT_EQ(from_ibv_mtu(IBV_MTU_2048), 2048);
}

// ---- QP attributes against the fake's state machine ---------------------------------------------

// A bare QP on the fake's first device, made the way the backend makes it.
struct RawQp {
    FakeVerbs& v;
    ibv_context* ctx;
    ibv_pd* pd;
    ibv_cq* cq;
    ibv_qp* qp;
    explicit RawQp(FakeVerbs& verbs) : v(verbs) {
        int n = 0;
        ibv_device** list = v.get_device_list(&n);
        ctx = v.open_device(list[0]);
        v.free_device_list(list);
        pd = v.alloc_pd(ctx);
        cq = v.create_cq(ctx, 64);
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = cq;
        init.qp_type = IBV_QPT_RC;
        init.cap = {16, 16, 1, 1, 0};
        qp = v.create_qp(pd, &init);
    }
    ~RawQp() {
        v.destroy_qp(qp);
        v.destroy_cq(cq);
        v.dealloc_pd(pd);
        v.close_device(ctx);
    }
    int apply(QpTransition t) { return v.modify_qp(qp, &t.attr, t.mask); }
};

RemoteQp some_remote(uint16_t mtu = 1024) {
    return {0x42, 0x123456, mtu, roce_v2_ipv4(0, ipv4(198, 18, 0, 2)).gid, 7, 0x1000, 1u << 20};
}

TEST(VerbsQpAttr, EachTransitionIsAcceptedInTurn) {
    FakeVerbs v({default_fake_device()});
    RawQp q(v);
    ASSERT_EQ(q.apply(qp_init_attr(1, IBV_ACCESS_REMOTE_WRITE)), 0) << v.last_error();
    EXPECT_EQ(v.qp_state(q.qp->qp_num), IBV_QPS_INIT);
    ASSERT_EQ(q.apply(qp_rtr_attr(some_remote(), 1, 1)), 0) << v.last_error();
    EXPECT_EQ(v.qp_state(q.qp->qp_num), IBV_QPS_RTR);
    ASSERT_EQ(q.apply(qp_rts_attr(0xabcdef)), 0) << v.last_error();
    EXPECT_EQ(v.qp_state(q.qp->qp_num), IBV_QPS_RTS);
    const ibv_qp_attr a = v.qp_attr(q.qp->qp_num);
    EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(a.dest_qp_num, 0x42u);
    EXPECT_EQ(a.rq_psn, 0x123456u);
    EXPECT_EQ(a.sq_psn, 0xabcdefu);
    EXPECT_EQ(a.ah_attr.is_global, 1);
    EXPECT_EQ(a.ah_attr.grh.hop_limit, 64);
    EXPECT_EQ(a.ah_attr.grh.sgid_index, 1);
    EXPECT_EQ(a.ah_attr.grh.dgid.raw[15], 2);
    EXPECT_EQ(a.timeout, 14);
    EXPECT_EQ(a.retry_cnt, 7);
    EXPECT_EQ(a.rnr_retry, 7);
    EXPECT_EQ(a.min_rnr_timer, 12);
    EXPECT_EQ(a.qp_access_flags, unsigned{IBV_ACCESS_REMOTE_WRITE});
}

TEST(VerbsQpAttr, WrongTransitionsGiveEinval) {
    FakeVerbs v({default_fake_device()});
    RawQp q(v);
    EXPECT_EQ(q.apply(qp_rtr_attr(some_remote(), 1, 1)), EINVAL);  // RESET->RTR
    EXPECT_EQ(v.qp_state(q.qp->qp_num), IBV_QPS_RESET);
    ASSERT_EQ(q.apply(qp_init_attr(1, IBV_ACCESS_REMOTE_WRITE)), 0);
    EXPECT_EQ(q.apply(qp_rts_attr(1)), EINVAL);  // INIT->RTS
    EXPECT_EQ(v.qp_state(q.qp->qp_num), IBV_QPS_INIT);
}

TEST(VerbsQpAttr, MissingOrExtraMaskBitsGiveEinval) {
    FakeVerbs v({default_fake_device()});
    RawQp q(v);
    QpTransition init = qp_init_attr(1, IBV_ACCESS_REMOTE_WRITE);
    init.mask &= ~IBV_QP_PKEY_INDEX;
    EXPECT_EQ(q.apply(init), EINVAL);
    ASSERT_EQ(q.apply(qp_init_attr(1, IBV_ACCESS_REMOTE_WRITE)), 0);
    QpTransition rtr = qp_rtr_attr(some_remote(), 1, 1);
    rtr.mask &= ~IBV_QP_MIN_RNR_TIMER;
    EXPECT_EQ(q.apply(rtr), EINVAL);
    rtr = qp_rtr_attr(some_remote(), 1, 1);
    rtr.mask |= IBV_QP_SQ_PSN;  // belongs to RTR->RTS
    EXPECT_EQ(q.apply(rtr), EINVAL);
    ASSERT_EQ(q.apply(qp_rtr_attr(some_remote(), 1, 1)), 0);
    QpTransition rts = qp_rts_attr(1);
    rts.mask &= ~IBV_QP_RNR_RETRY;
    EXPECT_EQ(q.apply(rts), EINVAL);
    EXPECT_EQ(v.qp_state(q.qp->qp_num), IBV_QPS_RTR);
}

TEST(VerbsQpAttr, RtrAboveActiveMtuOrWithoutGlobalRouteIsRefused) {
    FakeVerbs v({default_fake_device()});  // active MTU 1024
    RawQp q(v);
    ASSERT_EQ(q.apply(qp_init_attr(1, IBV_ACCESS_REMOTE_WRITE)), 0);
    EXPECT_EQ(q.apply(qp_rtr_attr(some_remote(4096), 1, 1)), EINVAL);
    QpTransition rtr = qp_rtr_attr(some_remote(), 1, 1);
    rtr.attr.ah_attr.is_global = 0;
    EXPECT_EQ(q.apply(rtr), EINVAL);
    EXPECT_EQ(q.apply(qp_rtr_attr(some_remote(), 9, 1)), EINVAL);  // no GID 9
}

TEST(VerbsQpAttr, PostSendBeforeRtsFailsLikeHardware) {
    FakeVerbs v({default_fake_device()});
    RawQp q(v);
    ASSERT_EQ(q.apply(qp_init_attr(1, IBV_ACCESS_REMOTE_WRITE)), 0);
    ASSERT_EQ(q.apply(qp_rtr_attr(some_remote(), 1, 1)), 0);
    std::vector<uint8_t> buf(64);
    ibv_mr* mr = v.reg_mr(q.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 64, mr->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(v.post_send(q.qp, &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
    v.dereg_mr(mr);
}

// ---- RdmaDevice ---------------------------------------------------------------------------------

TEST(VerbsDevice, NoDeviceGivesTheExactError) {
    FakeVerbs v({});
    std::string error;
    EXPECT_EQ(RdmaDevice::open(v, {}, error), nullptr);
    EXPECT_EQ(error, "no RDMA device: ibv_get_device_list found none (is an RDMA NIC or rxe configured?)");
}

TEST(VerbsDevice, NamedDeviceMissingListsTheDevices) {
    FakeVerbs v({default_fake_device("mlx5_0"), default_fake_device("rxe0")});
    RdmaOptions o;
    o.device = "mlx5_9";
    std::string error;
    EXPECT_EQ(RdmaDevice::open(v, o, error), nullptr);
    EXPECT_EQ(error, "RDMA device \"mlx5_9\" not found; devices: mlx5_0, rxe0");
    EXPECT_EQ(v.live_objects(), 0u);
}

TEST(VerbsDevice, PortDownOrMissingIsRefusedByName) {
    FakeDevice d = default_fake_device("rxe0");
    d.ports[0].state = IBV_PORT_DOWN;
    FakeVerbs v({d});
    std::string error;
    EXPECT_EQ(RdmaDevice::open(v, {}, error), nullptr);
    EXPECT_EQ(error, "RDMA device rxe0 port 1 is not active (state down)");
    RdmaOptions o;
    o.port = 2;
    EXPECT_EQ(RdmaDevice::open(v, o, error), nullptr);
    EXPECT_EQ(error, "RDMA device rxe0 has no port 2 (ports 1-1)");
    EXPECT_EQ(v.live_objects(), 0u);
}

TEST(VerbsDevice, NoUsableGidNamesDeviceAndPort) {
    FakeDevice d = default_fake_device("rxe0");
    d.ports[0].gids = {gid_row(0, Type::roce_v2, link_local_gid(1))};
    FakeVerbs v({d});
    std::string error;
    EXPECT_EQ(RdmaDevice::open(v, {}, error), nullptr);
    EXPECT_EQ(error.rfind("RDMA device rxe0 port 1: no GID fits", 0), 0u) << error;
}

TEST(VerbsDevice, OpensTheNamedDeviceAndPicksItsGid) {
    FakeVerbs v({default_fake_device("mlx5_0"), default_fake_device("rxe0")});
    RdmaOptions o;
    o.device = "rxe0";
    std::string error;
    {
        auto dev = RdmaDevice::open(v, o, error);
        ASSERT_NE(dev, nullptr) << error;
        EXPECT_EQ(dev->name(), "rxe0");
        EXPECT_EQ(dev->port(), 1);
        EXPECT_EQ(dev->gid_index(), 1u);
        EXPECT_EQ(format_gid(dev->gid()), "::ffff:198.18.0.1");
        EXPECT_EQ(dev->active_mtu_bytes(), 1024);
        EXPECT_EQ(v.live_objects(), 2u);  // context + PD
    }
    EXPECT_EQ(v.live_objects(), 0u);
}

// ---- RdmaConnection -------------------------------------------------------------------------------

constexpr ProcessId kPidA = ProcessId::make(1, 1, 10);
constexpr ProcessId kPidB = ProcessId::make(2, 1, 20);
constexpr uint64_t kConnId = 0x5eed;

struct Pair {
    FakeVerbs v{{default_fake_device()}};
    std::unique_ptr<RdmaDevice> dev;
    std::unique_ptr<RdmaConnection> a, b;
    Pair() {
        std::string error;
        dev = RdmaDevice::open(v, {}, error);
        if (!dev) throw std::runtime_error(error);
        a = RdmaConnection::prepare(*dev, error);
        b = RdmaConnection::prepare(*dev, error);
        if (!a || !b) throw std::runtime_error(error);
    }
    void connect(RemoteQp for_a, RemoteQp for_b) {
        std::string error;
        if (!a->connect(for_a, kPidA, kPidB, kConnId, error, nullptr) ||
            !b->connect(for_b, kPidB, kPidA, kConnId, error, nullptr))
            throw std::runtime_error(error);
    }
    void connect() { connect(b->local(), a->local()); }
};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> out(n);
    for (auto& b : out) b = static_cast<uint8_t>(rng());
    return out;
}

// Reads until the peer's fin, in odd-sized pieces so reads cross chunk and ring boundaries.
std::vector<uint8_t> read_to_end(Connection& c) {
    std::vector<uint8_t> got;
    std::vector<uint8_t> buf(77777);
    while (const size_t n = c.recv_some(buf)) got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(n));
    return got;
}

TEST(VerbsConnection, PrepareThenConnectReachesRtsWithPeerValues) {
    Pair p;
    const LocalQp la = p.a->local(), lb = p.b->local();
    EXPECT_EQ(p.v.qp_state(la.qpn), IBV_QPS_INIT);
    EXPECT_LE(la.psn, kMaxPsn);
    EXPECT_EQ(la.mtu, 1024);
    EXPECT_EQ(la.rlen, kRecvRingBytes);
    EXPECT_EQ(format_gid(la.gid), "::ffff:198.18.0.1");
    RemoteQp for_a = lb;
    for_a.mtu = 512;  // the peer's port is smaller: the path takes the lower
    p.connect(for_a, la);
    EXPECT_EQ(p.v.qp_state(la.qpn), IBV_QPS_RTS);
    EXPECT_EQ(p.v.qp_state(lb.qpn), IBV_QPS_RTS);
    EXPECT_EQ(p.a->path_mtu(), 512);
    EXPECT_EQ(p.v.qp_attr(la.qpn).path_mtu, IBV_MTU_512);
    EXPECT_EQ(p.v.qp_attr(la.qpn).dest_qp_num, lb.qpn);
    EXPECT_EQ(p.v.qp_attr(la.qpn).rq_psn, lb.psn);
    EXPECT_EQ(p.v.qp_attr(la.qpn).sq_psn, la.psn);
    EXPECT_EQ(p.a->peer_pid(), kPidB);
    EXPECT_EQ(p.b->conn_id(), kConnId);
    EXPECT_EQ(p.a->transport(), Transport::roce_v2);
}

TEST(VerbsConnection, ConnectRefusesAnUnusablePeerAtRtr) {
    Pair p;
    RemoteQp bad = p.b->local();
    bad.mtu = 1500;
    std::string error;
    RdmaConnection::Stage stage = RdmaConnection::Stage::rts;
    EXPECT_FALSE(p.a->connect(bad, kPidA, kPidB, kConnId, error, &stage));
    EXPECT_EQ(stage, RdmaConnection::Stage::rtr);
    EXPECT_EQ(error, "peer MTU 1500 is not an RDMA path MTU");
    EXPECT_EQ(p.v.qp_state(p.a->local().qpn), IBV_QPS_INIT);
}

TEST(VerbsConnection, TransfersTenMiBEachWayAndEndsWithFin) {
    Pair p;
    p.connect();
    const auto a_to_b = random_bytes(10u << 20, 1), b_to_a = random_bytes((10u << 20) + 12345, 2);
    std::vector<uint8_t> got_by_a, got_by_b;
    std::exception_ptr fail_a, fail_b;
    std::thread ta([&] {
        try {
            p.a->send_all(a_to_b);
            p.a->shutdown_send();
            got_by_a = read_to_end(*p.a);
        } catch (...) { fail_a = std::current_exception(); }
    });
    std::thread tb([&] {
        try {
            got_by_b = read_to_end(*p.b);
            p.b->send_all(b_to_a);
            p.b->shutdown_send();
        } catch (...) { fail_b = std::current_exception(); }
    });
    ta.join();
    tb.join();
    if (fail_a) std::rethrow_exception(fail_a);
    if (fail_b) std::rethrow_exception(fail_b);
    EXPECT_TRUE(got_by_b == a_to_b) << "b got " << got_by_b.size() << " bytes";
    EXPECT_TRUE(got_by_a == b_to_a) << "a got " << got_by_a.size() << " bytes";
    // 10 MiB through a 4 MiB ring needs credits: more messages than data chunks alone.
    EXPECT_GT(p.v.sends_delivered(), 2u * (10u << 20) / kStagingSlotBytes);
    uint8_t byte = 0;
    EXPECT_EQ(p.b->recv_some({&byte, 1}), 0u);  // still at end
}

// Like a socket: one thread sends while another receives on the same connection, both ends at once
// (the sidecar's two pump threads, a Python program's reader and writer).
TEST(VerbsConnection, OneThreadSendsWhileAnotherReceivesOnEachEnd) {
    Pair p;
    p.connect();
    const auto a_to_b = random_bytes(12u << 20, 3), b_to_a = random_bytes((12u << 20) + 999, 4);
    std::vector<uint8_t> got_by_a, got_by_b;
    std::exception_ptr fails[4];
    auto guarded = [](std::exception_ptr& f, auto body) {
        return [&f, body] {
            try {
                body();
            } catch (...) { f = std::current_exception(); }
        };
    };
    std::thread threads[] = {
        std::thread(guarded(fails[0], [&] { p.a->send_all(a_to_b); p.a->shutdown_send(); })),
        std::thread(guarded(fails[1], [&] { got_by_a = read_to_end(*p.a); })),
        std::thread(guarded(fails[2], [&] { p.b->send_all(b_to_a); p.b->shutdown_send(); })),
        std::thread(guarded(fails[3], [&] { got_by_b = read_to_end(*p.b); })),
    };
    for (auto& t : threads) t.join();
    for (auto& f : fails)
        if (f) std::rethrow_exception(f);
    EXPECT_TRUE(got_by_b == a_to_b) << "b got " << got_by_b.size() << " bytes";
    EXPECT_TRUE(got_by_a == b_to_a) << "a got " << got_by_a.size() << " bytes";
}

TEST(VerbsConnection, CancelWakesABlockedReceiverAndFailsLaterCalls) {
    Pair p;
    p.connect();
    std::promise<std::string> woke;
    std::thread reader([&] {
        uint8_t buf[16];
        try {
            (void)p.a->recv_some(buf);  // nothing will come: b never sends
            woke.set_value("returned");
        } catch (const ConnectionError& e) {
            woke.set_value(e.why());
        }
    });
    auto f = woke.get_future();
    EXPECT_EQ(f.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "recv_some did not block";
    p.a->cancel();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "cancel did not wake the reader";
    reader.join();
    EXPECT_NE(f.get().find("cancelled"), std::string::npos);
    const std::vector<uint8_t> one(1);
    EXPECT_THROW(p.a->send_all(one), ConnectionError);
}

TEST(VerbsConnection, CompletionErrorSurfacesAsConnectionError) {
    Pair p;
    RemoteQp wrong_key = p.b->local();
    wrong_key.rkey ^= 0x5a5a;
    p.connect(wrong_key, p.a->local());
    const auto data = random_bytes(1000, 3);
    try {
        p.a->send_all(data);
        p.a->shutdown_send();
        FAIL() << "no ConnectionError";
    } catch (const ConnectionError& e) {
        EXPECT_NE(std::string(e.what()).find("remote access error"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("an RDMA WRITE"), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.v.qp_state(p.a->local().qpn), IBV_QPS_ERR);
}

TEST(VerbsConnection, DataBeforeConnectIsRefused) {
    Pair p;
    const auto data = random_bytes(10, 4);
    EXPECT_THROW(p.a->send_all(data), ConnectionError);
}

TEST(VerbsConnection, DestroyingFreesEveryVerbsObject) {
    FakeVerbs v({default_fake_device()});
    std::string error;
    {
        auto dev = RdmaDevice::open(v, {}, error);
        ASSERT_NE(dev, nullptr) << error;
        auto c = RdmaConnection::prepare(*dev, error);
        ASSERT_NE(c, nullptr) << error;
        EXPECT_EQ(v.live_objects(), 2u + 1 + 1 + 3);  // context, PD, CQ, QP, three MRs
    }
    EXPECT_EQ(v.live_objects(), 0u);
}

}  // namespace
}  // namespace fedgate
