// The handshake state machines (fedgate/handshake.hpp), driven by hand: every loss, duplicate and
// timeout happens at an exact millisecond.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "fedgate/handshake.hpp"
#include "client/src/tcp_backend.hpp"

namespace fedgate {
namespace {

const ProcessId kInitiator = ProcessId::make(1, 7, 42);
const ProcessId kTarget = ProcessId::make(2, 3, 99);
constexpr uint64_t kConnId = 0x1122334455667788ULL;
constexpr uint64_t kTry = 300;
constexpr uint64_t kTimeout = 5000;

RdmaQpParams qp(uint32_t qpn, uint32_t psn, uint16_t mtu) {
    RdmaQpParams q;
    q.qpn = qpn;
    q.psn = psn;
    q.mtu = mtu;
    q.gid[15] = static_cast<uint8_t>(qpn);
    q.rkey = qpn + 1;
    q.raddr = 0x1000 + qpn;
    q.rlen = 1 << 20;
    return q;
}

ConnParams req(uint8_t caps, std::optional<RdmaQpParams> rdma = std::nullopt) {
    ConnParams p;
    p.conn_id = kConnId;
    p.initiator = kInitiator;
    p.target = kTarget;
    p.caps = caps;
    if (rdma) put_rdma_params(*rdma, p);
    return p;
}

PassiveOffer tcp_offer() {
    PassiveOffer o;
    o.listening = true;
    o.caps = kCapTcp;
    o.tcp_ipv4 = 0xc6120214;
    o.tcp_port = 5000;
    return o;
}

PassiveHandshakes passive() { return PassiveHandshakes(kTarget, kTimeout, 16); }

// ---- the initiator ---------------------------------------------------------------------------

TEST(HandshakeActive, HappyPathTcpSendsReqThenRtuWithTheSameBody) {
    PassiveHandshakes target = passive();
    ActiveHandshake hs(req(kCapTcp), kTry, 6);
    const ConnParams sent = hs.start(1000);
    EXPECT_EQ(sent, req(kCapTcp));
    const ConnParams rep = target.on_req(sent, tcp_offer(), 1001);
    EXPECT_EQ(rep.status, ConnStatus::ok);
    EXPECT_EQ(rep.caps, kCapTcp);
    EXPECT_EQ(rep.ipv4, 0xc6120214u);
    EXPECT_EQ(rep.port, 5000);
    EXPECT_FALSE(hs.on_rep(rep));
    EXPECT_EQ(hs.state(), ActiveHandshake::State::rep_received);
    EXPECT_EQ(hs.rep(), rep);
    const ConnParams rtu = hs.complete();
    EXPECT_EQ(rtu, sent);
    EXPECT_EQ(hs.state(), ActiveHandshake::State::done);
    EXPECT_EQ(target.on_preamble(kConnId, kInitiator, kTarget) != nullptr, true);
    EXPECT_EQ(target.on_rtu(rtu), PassiveHandshakes::RtuResult::late);  // the preamble came first
    EXPECT_EQ(target.counters().established_by_preamble, 1u);
    EXPECT_EQ(target.counters().late_rtus, 1u);
}

TEST(HandshakeActive, LostReqIsRetransmittedWithDoublingTimeoutAndSameConnId) {
    ActiveHandshake hs(req(kCapTcp), kTry, 3);
    hs.start(0);
    EXPECT_EQ(hs.deadline(), 300u);
    EXPECT_FALSE(hs.on_timer(299));
    const auto again = hs.on_timer(300);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->conn_id, kConnId);
    EXPECT_EQ(hs.deadline(), 900u);  // 300 + 600
    EXPECT_FALSE(hs.on_timer(899));
    ASSERT_TRUE(hs.on_timer(900));
    EXPECT_EQ(hs.deadline(), 2100u);  // 900 + 1200
    EXPECT_EQ(hs.counters().reqs_sent, 3u);
    EXPECT_EQ(hs.counters().req_retransmits, 2u);
    EXPECT_EQ(hs.state(), ActiveHandshake::State::waiting_rep);
}

TEST(HandshakeActive, NoRepAfterAllTriesFailsAtStageRep) {
    ActiveHandshake hs(req(kCapTcp), kTry, 2);
    hs.start(0);
    ASSERT_TRUE(hs.on_timer(300));
    EXPECT_FALSE(hs.on_timer(900));
    EXPECT_EQ(hs.state(), ActiveHandshake::State::failed);
    EXPECT_EQ(hs.failure().stage, ConnStage::rep);
    EXPECT_EQ(hs.failure().message, "no REP from 2.3.99 after 2 tries");
    EXPECT_STREQ(conn_stage_name(hs.failure().stage), "rep");
}

TEST(HandshakeActive, LostRepIsAnsweredWithTheSavedRepForTheRetransmittedReq) {
    PassiveHandshakes target = passive();
    ActiveHandshake hs(req(kCapTcp), kTry, 6);
    const ConnParams first = target.on_req(hs.start(0), tcp_offer(), 0);  // this REP is lost
    const auto again = hs.on_timer(300);
    ASSERT_TRUE(again);
    ASSERT_FALSE(target.repeat(req(kCapRdma)) == std::nullopt);  // same key: (initiator, conn_id)
    const auto second = target.repeat(*again);
    ASSERT_TRUE(second);
    EXPECT_EQ(*second, first);
    EXPECT_EQ(target.counters().duplicate_reqs, 2u);
    EXPECT_EQ(target.counters().reqs, 1u);
    hs.on_rep(*second);
    EXPECT_EQ(hs.state(), ActiveHandshake::State::rep_received);
}

TEST(HandshakeActive, DuplicateRepAfterDoneSendsTheRtuAgain) {
    ActiveHandshake hs(req(kCapTcp), kTry, 6);
    hs.start(0);
    ConnParams rep = req(kCapTcp);
    rep.ipv4 = 1;
    rep.port = 2;
    hs.on_rep(rep);
    EXPECT_FALSE(hs.on_rep(rep));  // still bringing its side up: nothing to repeat yet
    const ConnParams rtu = hs.complete();
    const auto again = hs.on_rep(rep);
    ASSERT_TRUE(again);
    EXPECT_EQ(*again, rtu);
    EXPECT_EQ(hs.counters().duplicate_reps, 2u);
    EXPECT_EQ(hs.counters().rtus_sent, 2u);
}

TEST(HandshakeActive, RepForAnotherConnectionIsIgnored) {
    ActiveHandshake hs(req(kCapTcp), kTry, 6);
    hs.start(0);
    ConnParams rep = req(kCapTcp);
    rep.conn_id = 7;
    hs.on_rep(rep);
    rep = req(kCapTcp);
    rep.target = ProcessId::make(2, 3, 100);
    hs.on_rep(rep);
    EXPECT_EQ(hs.state(), ActiveHandshake::State::waiting_rep);
    EXPECT_EQ(hs.counters().ignored_reps, 2u);
}

TEST(HandshakeActive, RefusalsNameTheirStageAndStatus) {
    struct Case {
        ConnStatus status;
        ConnStage stage;
    };
    for (const Case c : {Case{ConnStatus::not_listening, ConnStage::refused},
                         Case{ConnStatus::transport_mismatch, ConnStage::transport},
                         Case{ConnStatus::unknown_target, ConnStage::refused}, Case{ConnStatus::busy, ConnStage::refused},
                         Case{ConnStatus::unknown_initiator, ConnStage::req}, Case{ConnStatus::no_peer, ConnStage::req},
                         Case{ConnStatus::bad_request, ConnStage::req}}) {
        ActiveHandshake hs(req(kCapTcp), kTry, 6);
        hs.start(0);
        ConnParams rep = req(0);
        rep.status = c.status;
        hs.on_rep(rep);
        EXPECT_EQ(hs.state(), ActiveHandshake::State::failed);
        EXPECT_EQ(hs.failure().stage, c.stage) << conn_status_name(c.status);
        EXPECT_TRUE(hs.failure().message.starts_with(conn_status_name(c.status))) << hs.failure().message;
    }
}

TEST(HandshakeActive, RepChoosingATransportNotOfferedFailsAtStageTransport) {
    ActiveHandshake hs(req(kCapTcp), kTry, 6);
    hs.start(0);
    ConnParams rep = req(kCapRdma, qp(5, 6, 1024));
    hs.on_rep(rep);
    EXPECT_EQ(hs.failure().stage, ConnStage::transport);
    EXPECT_NE(hs.failure().message.find("did not offer"), std::string::npos);
}

TEST(HandshakeActive, OkRepWithBadRdmaMtuOrNoTcpAddressFailsAtStageRep) {
    ActiveHandshake rdma(req(kCapAll, qp(1, 2, 1024)), kTry, 6);
    rdma.start(0);
    rdma.on_rep(req(kCapRdma, qp(5, 6, 1500)));
    EXPECT_EQ(rdma.failure().stage, ConnStage::rep);
    ActiveHandshake tcp(req(kCapTcp), kTry, 6);
    tcp.start(0);
    tcp.on_rep(req(kCapTcp));
    EXPECT_EQ(tcp.failure().stage, ConnStage::rep);
    EXPECT_EQ(tcp.failure().message, "the REP carries no tcp address");
}

// ---- the target ------------------------------------------------------------------------------

TEST(HandshakePassive, NotListeningAndTransportMismatchAreRefusedAndRepeated) {
    PassiveHandshakes target = passive();
    PassiveOffer off = tcp_offer();
    off.listening = false;
    const ConnParams r1 = target.on_req(req(kCapTcp), off, 0);
    EXPECT_EQ(r1.status, ConnStatus::not_listening);
    EXPECT_EQ(r1.caps, 0);
    EXPECT_EQ(*target.repeat(req(kCapTcp)), r1);

    ConnParams rdma_only = req(kCapRdma, qp(1, 2, 1024));
    rdma_only.conn_id = 99;
    const ConnParams r2 = target.on_req(rdma_only, tcp_offer(), 0);
    EXPECT_EQ(r2.status, ConnStatus::transport_mismatch);
    EXPECT_EQ(target.counters().refused[static_cast<size_t>(ConnStatus::not_listening)], 1u);
    EXPECT_EQ(target.counters().refused[static_cast<size_t>(ConnStatus::transport_mismatch)], 1u);
    EXPECT_EQ(target.half_open(), 0u);
}

TEST(HandshakePassive, BacklogFullIsAnsweredBusy) {
    PassiveHandshakes target = passive();
    PassiveOffer off = tcp_offer();
    off.backlog_full = true;
    EXPECT_EQ(target.on_req(req(kCapTcp), off, 0).status, ConnStatus::busy);
}

TEST(HandshakePassive, FullTableAnswersBusyWithoutSaving) {
    PassiveHandshakes target(kTarget, kTimeout, 1);
    EXPECT_EQ(target.on_req(req(kCapTcp), tcp_offer(), 0).status, ConnStatus::ok);
    ConnParams other = req(kCapTcp);
    other.conn_id = 2;
    EXPECT_EQ(target.on_req(other, tcp_offer(), 0).status, ConnStatus::busy);
    EXPECT_EQ(target.size(), 1u);
    EXPECT_EQ(target.counters().table_full, 1u);
}

TEST(HandshakePassive, AFullTableMakesRoomByDroppingFinishedHandshakes) {
    PassiveHandshakes target(kTarget, kTimeout, 1);
    PassiveOffer off = tcp_offer();
    off.caps = kCapAll;
    off.rdma = qp(0x2222, 0x00abcd, 4096);
    ASSERT_EQ(target.on_req(req(kCapAll, qp(0x1111, 0x123456, 1024)), off, 0).status, ConnStatus::ok);
    ASSERT_EQ(target.on_rtu(req(kCapAll)), PassiveHandshakes::RtuResult::established);
    ConnParams other = req(kCapTcp);
    other.conn_id = 2;
    EXPECT_EQ(target.on_req(other, tcp_offer(), 0).status, ConnStatus::ok) << "the established one made room";
    EXPECT_EQ(target.counters().finished_evicted, 1u);
    EXPECT_EQ(target.half_open(), 1u);
    ConnParams third = req(kCapTcp);
    third.conn_id = 3;
    EXPECT_EQ(target.on_req(third, tcp_offer(), 0).status, ConnStatus::busy) << "a half-open one does not";
}

TEST(HandshakePassive, RdmaRtuEstablishesAndALateRtuIsCounted) {
    PassiveHandshakes target = passive();
    PassiveOffer off = tcp_offer();
    off.caps = kCapAll;
    off.rdma = qp(0x2222, 0x00abcd, 4096);
    const ConnParams rep = target.on_req(req(kCapAll, qp(0x1111, 0x123456, 1024)), off, 0);
    EXPECT_EQ(rep.status, ConnStatus::ok);
    EXPECT_EQ(rep.caps, kCapRdma);
    EXPECT_EQ(rdma_params_of(rep), qp(0x2222, 0x00abcd, 4096));
    EXPECT_EQ(rep.ipv4, 0u);
    EXPECT_EQ(target.half_open(), 1u);
    EXPECT_EQ(target.on_rtu(req(kCapAll)), PassiveHandshakes::RtuResult::established);
    EXPECT_EQ(target.on_rtu(req(kCapAll)), PassiveHandshakes::RtuResult::late);
    ConnParams unknown = req(kCapAll);
    unknown.conn_id = 5;
    EXPECT_EQ(target.on_rtu(unknown), PassiveHandshakes::RtuResult::late);
    EXPECT_EQ(target.counters().established_by_rtu, 1u);
    EXPECT_EQ(target.counters().late_rtus, 2u);
    EXPECT_EQ(target.half_open(), 0u);
}

TEST(HandshakePassive, TcpRtuWaitsForThePreambleWhichMustMatch) {
    PassiveHandshakes target = passive();
    target.on_req(req(kCapTcp), tcp_offer(), 0);
    EXPECT_EQ(target.on_rtu(req(kCapTcp)), PassiveHandshakes::RtuResult::awaiting_preamble);
    EXPECT_EQ(target.on_preamble(kConnId, kInitiator, ProcessId::make(2, 3, 100)), nullptr);  // wrong target
    EXPECT_EQ(target.on_preamble(kConnId + 1, kInitiator, kTarget), nullptr);                 // unknown conn_id
    const auto* e = target.on_preamble(kConnId, kInitiator, kTarget);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->req, req(kCapTcp));
    EXPECT_EQ(target.on_preamble(kConnId, kInitiator, kTarget), nullptr);  // only once
    EXPECT_EQ(target.counters().unknown_preambles, 3u);
    EXPECT_EQ(target.counters().established_by_rtu, 1u);
}

TEST(HandshakePassive, HalfOpenEntriesExpireAndAreCountedFinishedOnesAreForgotten) {
    PassiveHandshakes target = passive();
    target.on_req(req(kCapTcp), tcp_offer(), 100);
    ConnParams done = req(kCapTcp);
    done.conn_id = 2;
    target.on_req(done, tcp_offer(), 200);
    ASSERT_NE(target.on_preamble(2, kInitiator, kTarget), nullptr);
    EXPECT_EQ(target.next_expiry(), 100 + kTimeout);
    EXPECT_TRUE(target.expire(100 + kTimeout - 1).empty());
    const auto dropped = target.expire(100 + kTimeout);
    ASSERT_EQ(dropped.size(), 1u);
    EXPECT_EQ(dropped[0], (PassiveHandshakes::Key{kInitiator.value, kConnId}));
    EXPECT_EQ(target.counters().half_open_dropped, 1u);
    EXPECT_TRUE(target.expire(200 + kTimeout).empty());  // established: forgotten, not counted
    EXPECT_EQ(target.size(), 0u);
    EXPECT_EQ(target.counters().half_open_dropped, 1u);
    EXPECT_EQ(target.on_rtu(req(kCapTcp)), PassiveHandshakes::RtuResult::late);  // too late now
}

// ---- negotiation -----------------------------------------------------------------------------

TEST(HandshakeNegotiation, MtuIsTheLowerAndEachDirectionUsesItsOwnPsn) {
    const RdmaQpParams initiator = qp(0x111, 0xfffffe, 4096);
    const RdmaQpParams target = qp(0x222, 0x000001, 1024);
    const RdmaPath at_initiator = rdma_path(initiator, target);
    const RdmaPath at_target = rdma_path(target, initiator);
    EXPECT_EQ(at_initiator.mtu, 1024);
    EXPECT_EQ(at_target.mtu, 1024);
    // What one side sends from is what the other expects to receive.
    EXPECT_EQ(at_initiator.sq_psn, 0xfffffeu);
    EXPECT_EQ(at_target.rq_psn, 0xfffffeu);
    EXPECT_EQ(at_target.sq_psn, 0x000001u);
    EXPECT_EQ(at_initiator.rq_psn, 0x000001u);
    EXPECT_EQ(at_initiator.remote, target);
    EXPECT_EQ(at_target.remote, initiator);
}

TEST(HandshakeNegotiation, RandomPsnsStayWithin24BitsAndDiffer) {
    std::mt19937_64 rng(42);
    std::set<uint32_t> seen;
    for (int i = 0; i < 1000; ++i) {
        const uint32_t psn = random_psn(rng);
        EXPECT_LE(psn, kMaxPsn);
        seen.insert(psn);
    }
    EXPECT_GT(seen.size(), 990u);
}

TEST(HandshakeNegotiation, RdmaIsChosenOverTcpAndAnInvalidRdmaMtuFallsBackToTcp) {
    PassiveHandshakes target = passive();
    PassiveOffer off = tcp_offer();
    off.caps = kCapAll;
    off.rdma = qp(9, 9, 2048);
    EXPECT_EQ(target.on_req(req(kCapAll, qp(1, 1, 4096)), off, 0).caps, kCapRdma);
    ConnParams bad_mtu = req(kCapAll, qp(1, 1, 1500));
    bad_mtu.conn_id = 2;
    const ConnParams rep = target.on_req(bad_mtu, off, 0);
    EXPECT_EQ(rep.caps, kCapTcp);
    EXPECT_EQ(rep.qpn, 0u);
    EXPECT_EQ(rep.port, 5000);
    // An offer without a prepared QP cannot choose RDMA either.
    off.rdma.reset();
    ConnParams no_qp = req(kCapAll, qp(1, 1, 4096));
    no_qp.conn_id = 3;
    EXPECT_EQ(target.on_req(no_qp, off, 0).caps, kCapTcp);
}

TEST(HandshakePreamble, RoundTripsAndRejectsBadBytes) {
    const Preamble p{kConnId, kInitiator, kTarget};
    PreambleWire w;
    encode(p, w);
    EXPECT_EQ(w.magic[0], 'F');
    EXPECT_EQ(w.magic[3], 'C');
    EXPECT_EQ(w.conn_id[0], 0x11);
    EXPECT_EQ(decode(w), p);
    PreambleWire bad = w;
    bad.version = 2;
    EXPECT_FALSE(decode(bad));
    bad = w;
    bad.reserved[1] = 1;
    EXPECT_FALSE(decode(bad));
    bad = w;
    std::memset(bad.conn_id, 0, sizeof bad.conn_id);
    EXPECT_FALSE(decode(bad));
}

}  // namespace
}  // namespace fedgate
