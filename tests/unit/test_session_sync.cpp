// Session events for the group's standby members ([cluster] sync): the NAT's event log (opened with
// the flow both ways, closed on expiry, bounded and counted), the datagram format (round trip, and
// every malformed field named), and the mirror a member keeps from them (order, duplicates, gaps,
// a sender's new run, resync snapshots, its bound).
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "controlplane/session_sync.hpp"
#include "dataplane/nat.hpp"
#include "tests/support/nat_fixtures.hpp"

namespace fedgate {
namespace {

using namespace fedgate::test;

NatConfig quick_timeouts() {
    NatConfig c = nat_fixture_config();
    c.timeouts.tcp_transitory_ms = 1000;
    c.timeouts.udp_ms = 2000;
    return c;
}

std::vector<SessionEvent> events_of(const Nat& nat) { return {nat.events().begin(), nat.events().end()}; }

// A whole sweep of the table: while events are logged, one expire() looks at no more sessions than
// the log has room for.
uint32_t expire_all(Nat& nat, uint64_t now) {
    uint32_t n = 0;
    for (uint32_t i = 0; i <= nat.sessions().capacity() / Nat::kEventLog; ++i) n += nat.expire(now, nat.sessions().capacity());
    return n;
}

TEST(NatSessionEvents, NoneAreLoggedUntilTurnedOn) {
    NatRig rig(quick_timeouts());
    auto f = tcp_frame(kNode, 40000, kInternalAddr, kImportTcpPort, kSyn);
    rig.handle(f, 0, 0);
    EXPECT_TRUE(rig.nat.events().empty());
    EXPECT_EQ(rig.nat.session_count(), 1u);
}

TEST(NatSessionEvents, AnImportOpensWithBothTuplesAndItsTimeoutThenClosesOnExpiry) {
    NatRig rig(quick_timeouts());
    rig.nat.log_events(true);
    auto syn = tcp_frame(kNode, 40000, kInternalAddr, kImportTcpPort, kSyn);
    ASSERT_EQ(rig.handle(syn, 0, 100).kind, Nat::Verdict::Kind::forward);
    // A packet of an open session logs nothing more.
    auto again = tcp_frame(kNode, 40000, kInternalAddr, kImportTcpPort, kSyn);
    rig.handle(again, 0, 200);
    std::vector<SessionEvent> ev = events_of(rig.nat);
    ASSERT_EQ(ev.size(), 1u);
    const SessionEvent o = ev[0];
    EXPECT_EQ(o.type, SessionEvent::opened);
    EXPECT_EQ(o.proto, 6);
    EXPECT_EQ(o.kind, 0);  // import
    EXPECT_EQ(o.out_port, 1);
    EXPECT_EQ(o.in_src, net_addr(kNode));
    EXPECT_EQ(o.in_dst, net_addr(kInternalAddr));
    EXPECT_EQ(ntohs(o.in_sport), 40000);
    EXPECT_EQ(ntohs(o.in_dport), kImportTcpPort);
    EXPECT_EQ(o.out_src, net_addr(kExternalAddr));
    EXPECT_EQ(o.out_dst, net_addr(kPeer));
    EXPECT_EQ(ntohs(o.out_sport), kFirstNatPort);
    EXPECT_EQ(ntohs(o.out_dport), kPeerTcpPort);
    EXPECT_EQ(o.timeout_ms, 1000u);  // a SYN alone: transitory
    rig.nat.clear_events();

    EXPECT_EQ(expire_all(rig.nat, 1199), 0u);
    EXPECT_TRUE(rig.nat.events().empty());
    EXPECT_EQ(expire_all(rig.nat, 1200), 1u);
    ev = events_of(rig.nat);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, SessionEvent::closed);
    EXPECT_EQ(ev[0].in_src, o.in_src);
    EXPECT_EQ(ev[0].in_sport, o.in_sport);
    EXPECT_EQ(ev[0].out_sport, o.out_sport);
}

TEST(NatSessionEvents, ASweepExpiresNoMoreThanTheLogHasRoomFor) {
    NatRig rig(quick_timeouts());
    rig.nat.log_events(true);
    for (uint32_t i = 0; i < Nat::kEventLog; ++i) {
        auto f = udp_frame(kNode, static_cast<uint16_t>(30000 + i), kInternalAddr, kImportUdpPort);
        ASSERT_EQ(rig.handle(f, 0, 0).kind, Nat::Verdict::Kind::forward);
    }
    ASSERT_EQ(rig.nat.events().size(), Nat::kEventLog);  // full of opens
    EXPECT_EQ(expire_all(rig.nat, 5000), 0u) << "no room to log a close: nothing expires yet";
    rig.nat.clear_events();  // the data plane flushed it
    EXPECT_EQ(expire_all(rig.nat, 5000), Nat::kEventLog);
    EXPECT_EQ(rig.nat.events().size(), Nat::kEventLog);
    EXPECT_EQ(rig.nat.counters().session_events_lost.get(), 0u) << "no close was lost";
}

TEST(NatSessionEvents, AnExportIsLoggedAsAnExport) {
    NatRig rig(quick_timeouts());
    rig.nat.log_events(true);
    auto f = udp_frame(kPeer, 33000, kExternalAddr, kExportUdpPort);
    ASSERT_EQ(rig.handle(f, 1, 0).kind, Nat::Verdict::Kind::forward);
    const std::vector<SessionEvent> ev = events_of(rig.nat);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].kind, 1);
    EXPECT_EQ(ev[0].proto, 17);
    EXPECT_EQ(ev[0].out_dst, net_addr(kExportNode));
    EXPECT_EQ(ev[0].timeout_ms, 2000u);
}

TEST(NatSessionEvents, AFullLogCountsWhatItCouldNotKeep) {
    NatRig rig(quick_timeouts());
    rig.nat.log_events(true);
    const uint32_t extra = 7;
    for (uint32_t i = 0; i < Nat::kEventLog + extra; ++i) {
        auto f = udp_frame(kNode, static_cast<uint16_t>(30000 + i), kInternalAddr, kImportUdpPort);
        ASSERT_EQ(rig.handle(f, 0, 0).kind, Nat::Verdict::Kind::forward);
    }
    EXPECT_EQ(rig.nat.events().size(), Nat::kEventLog);
    EXPECT_EQ(rig.nat.counters().session_events_lost.get(), extra);
    rig.nat.clear_events();
    rig.nat.events_lost(3);  // what the data plane's ring refused
    EXPECT_EQ(rig.nat.counters().session_events_lost.get(), extra + 3);
}

SessionEvent ev(uint8_t type, uint16_t sport, uint32_t timeout = 5000) {
    SessionEvent e;
    e.type = type;
    e.proto = 6;
    e.kind = 0;
    e.out_port = 1;
    e.in_src = htonl(0xc6120a0a);  // 198.18.10.10
    e.in_dst = htonl(0xc6120101);
    e.in_sport = htons(sport);
    e.in_dport = htons(5000);
    e.out_src = htonl(0xc6130001);
    e.out_dst = htonl(0xc6130002);
    e.out_sport = htons(static_cast<uint16_t>(sport + 1));
    e.out_dport = htons(6000);
    e.timeout_ms = timeout;
    return e;
}

SyncDatagram events_dgram(const std::string& member, uint64_t boot, uint64_t seq, std::vector<SessionEvent> e) {
    SyncDatagram d;
    d.kind = SyncDatagram::Kind::events;
    d.member = member;
    d.boot = boot;
    d.seq = seq;
    d.events = std::move(e);
    return d;
}

TEST(SyncDatagram, RoundTripsEveryField) {
    SyncDatagram d = events_dgram("gw-a1", 0x0102030405060708ull, 77, {ev(SessionEvent::opened, 40000, 123456),
                                                                       ev(SessionEvent::closed, 40001)});
    d.events[1].proto = 17;
    d.events[1].kind = 1;
    d.flags = 3;
    const std::vector<uint8_t> b = d.encode();
    EXPECT_EQ(b.size(), 8 + 5 + 22 + 2 * 32u);
    std::string why;
    const auto back = SyncDatagram::decode(b, &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->kind, d.kind);
    EXPECT_EQ(back->flags, 3);
    EXPECT_EQ(back->member, "gw-a1");
    EXPECT_EQ(back->boot, d.boot);
    EXPECT_EQ(back->seq, 77u);
    ASSERT_EQ(back->events.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
        const SessionEvent &a = d.events[i], &c = back->events[i];
        EXPECT_EQ(std::vector<uint32_t>({a.type, a.proto, a.kind, a.out_port, a.in_src, a.in_dst, a.in_sport, a.in_dport,
                                         a.out_src, a.out_dst, a.out_sport, a.out_dport, a.timeout_ms}),
                  std::vector<uint32_t>({c.type, c.proto, c.kind, c.out_port, c.in_src, c.in_dst, c.in_sport, c.in_dport,
                                         c.out_src, c.out_dst, c.out_sport, c.out_dport, c.timeout_ms}));
    }
    // The timeout is big-endian on the wire, whatever the host.
    const std::size_t t = 8 + 5 + 22 + 28;
    EXPECT_EQ((b[t] << 24 | b[t + 1] << 16 | b[t + 2] << 8 | b[t + 3]), 123456);
}

// Each case sets one byte of `good` and must be refused with a reason that contains its text.
struct Malformed {
    const char* what;
    std::size_t at;
    uint8_t value;
    const char* reason;
};
void expect_each_refused(const std::vector<uint8_t>& good, std::initializer_list<Malformed> cases) {
    for (const Malformed& c : cases) {
        std::vector<uint8_t> b = good;
        b[c.at] = c.value;
        std::string why;
        EXPECT_FALSE(SyncDatagram::decode(b, &why)) << c.what;
        EXPECT_NE(why.find(c.reason), std::string::npos) << c.what << ": " << why;
    }
    for (std::size_t n = 0; n < good.size(); ++n) {  // every truncation
        std::string why;
        EXPECT_FALSE(SyncDatagram::decode({good.data(), n}, &why)) << n;
    }
}

TEST(SyncDatagram, EachMalformedFieldIsRefusedAndNamed) {
    const std::vector<uint8_t> good = events_dgram("a1", 1, 0, {ev(SessionEvent::opened, 1)}).encode();
    const std::size_t ev0 = 8 + 2 + 22;
    expect_each_refused(good, {
                                  {"magic", 0, 'X', "not a session-event datagram"},
                                  {"version", 4, 2, "version 2"},
                                  {"kind", 5, 9, "kind 9"},
                                  {"name length 0", 7, 0, "member name of 0 bytes"},
                                  {"name length 40", 7, 40, "member name of 40 bytes"},
                                  {"name chars", 8, '/', "member name is not"},
                                  {"count", 8 + 2 + 17, 2, "bytes for 2 events"},
                                  {"part of an events datagram", ev0 - 1, 1, "part 1 of a datagram that is no snapshot"},
                                  {"event type", ev0, 3, "event 0: type 3"},
                                  {"event protocol", ev0 + 1, 1, "event 0: protocol 1"},
                                  {"event kind", ev0 + 2, 2, "event 0: kind 2"},
                              });
    SyncDatagram snap = events_dgram("a1", 1, 0, {ev(SessionEvent::closed, 1)});
    snap.kind = SyncDatagram::Kind::snapshot;
    std::string why;
    EXPECT_FALSE(SyncDatagram::decode(snap.encode(), &why));
    EXPECT_NE(why.find("open sessions only"), std::string::npos) << why;
    SyncDatagram ask = events_dgram("a1", 1, 0, {ev(SessionEvent::opened, 1)});
    ask.kind = SyncDatagram::Kind::resync_request;
    EXPECT_FALSE(SyncDatagram::decode(ask.encode(), &why));
    EXPECT_NE(why.find("resync request with events"), std::string::npos) << why;
    std::vector<SessionEvent> many(SyncDatagram::kMaxEvents + 1, ev(SessionEvent::opened, 1));
    EXPECT_FALSE(SyncDatagram::decode(events_dgram("a1", 1, 0, many).encode(), &why));
    EXPECT_NE(why.find("41 events"), std::string::npos) << why;
}

// ---- the warm cache's records ----

CacheRecord cache_record(uint32_t local, CacheKind kind, uint32_t ttl_ms) {
    CacheRecord r;
    r.record.pid = ProcessId::make(2, 7, local);
    r.record.epoch = 3;
    r.record.transport = Transport::tcp;
    r.record.ipv4 = 0xC6120214;  // 198.18.2.20
    r.record.port = 7000;
    r.key = kind == CacheKind::answered ? r.record.pid.with_party(0) : r.record.pid;
    r.owner_party = 2;
    r.kind = kind;
    r.ttl_ms = ttl_ms;
    return r;
}

SyncDatagram cache_dgram(std::vector<CacheRecord> records) {
    SyncDatagram d;
    d.kind = SyncDatagram::Kind::cache;
    d.member = "a1";
    d.boot = 5;
    d.seq = 42;
    d.part = 3;
    d.flags = SyncDatagram::kLast;
    d.records = std::move(records);
    return d;
}

TEST(SyncDatagram, CacheRecordsRoundTripEveryField) {
    const SyncDatagram d = cache_dgram({cache_record(1, CacheKind::announced, 0), cache_record(2, CacheKind::answered, 29500)});
    const std::vector<uint8_t> b = d.encode();
    EXPECT_EQ(b.size(), 8u + 2 + 22 + 2 * 64);
    std::string why;
    const auto back = SyncDatagram::decode(b, &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->kind, SyncDatagram::Kind::cache);
    EXPECT_EQ(back->seq, 42u);
    EXPECT_EQ(back->part, 3u);
    EXPECT_EQ(back->flags, SyncDatagram::kLast);
    EXPECT_EQ(back->records, d.records);
    EXPECT_TRUE(back->events.empty());
    EXPECT_EQ(back->encode(), b);
    SyncDatagram ask;
    ask.kind = SyncDatagram::Kind::cache_request;
    ask.member = "a2";
    ask.seq = 41;
    const auto a = SyncDatagram::decode(ask.encode(), &why);
    ASSERT_TRUE(a) << why;
    EXPECT_EQ(a->kind, SyncDatagram::Kind::cache_request);
    EXPECT_EQ(a->seq, 41u);
}

TEST(SyncDatagram, EachMalformedCacheRecordIsRefusedAndNamed) {
    const std::vector<uint8_t> good = cache_dgram({cache_record(1, CacheKind::announced, 0)}).encode();
    const std::size_t r0 = 8 + 2 + 22;
    expect_each_refused(good, {
                                  {"count", 8 + 2 + 17, 2, "bytes for 2 records"},
                                  {"kind local", r0 + 10, 0, "record 0: kind 0"},
                                  {"kind negative", r0 + 10, 3, "record 0: kind 3"},
                                  {"reserved", r0 + 11, 1, "record 0: a reserved byte is set"},
                                  {"transport", r0 + 16 + 12, 9, "record 0: not a valid DMA address record"},
                              });
    std::vector<uint8_t> no_owner = good;
    no_owner[r0 + 8] = no_owner[r0 + 9] = 0;
    std::string why;
    EXPECT_FALSE(SyncDatagram::decode(no_owner, &why));
    EXPECT_NE(why.find("owner party 0"), std::string::npos) << why;
    EXPECT_FALSE(SyncDatagram::decode(
        cache_dgram(std::vector<CacheRecord>(SyncDatagram::kMaxRecords + 1, cache_record(1, CacheKind::announced, 0))).encode(),
        &why));
    EXPECT_NE(why.find("21 records"), std::string::npos) << why;
    SyncDatagram ask = cache_dgram({cache_record(1, CacheKind::announced, 0)});
    ask.kind = SyncDatagram::Kind::cache_request;
    ask.part = 0;
    EXPECT_FALSE(SyncDatagram::decode(ask.encode(), &why));
    EXPECT_NE(why.find("a cache request with records"), std::string::npos) << why;
}

TEST(SessionMirror, ForgedSequenceNumbersCannotWrapTheMissedCounter) {
    SessionMirror m(100);
    m.apply(events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 1)}));
    EXPECT_TRUE(m.apply(events_dgram("a1", 9, UINT64_MAX - 300, {ev(SessionEvent::opened, 2)})));
    const uint64_t missed = m.counters().events_missed;
    EXPECT_GT(missed, UINT64_MAX / 2);
    m.apply(events_dgram("a1", 10, 0, {ev(SessionEvent::opened, 3)}));  // a new run
    m.apply(events_dgram("a1", 10, UINT64_MAX - 200, {ev(SessionEvent::opened, 4)}));
    EXPECT_GE(m.counters().events_missed, missed) << "the counter wrapped round (found by fuzz_sync)";
}

TEST(SessionMirror, EventsInOrderOpenAndCloseSessions) {
    SessionMirror m(100);
    EXPECT_FALSE(m.apply(events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 1), ev(SessionEvent::opened, 2)})));
    EXPECT_FALSE(m.apply(events_dgram("a1", 9, 2, {ev(SessionEvent::closed, 1), ev(SessionEvent::opened, 3)})));
    EXPECT_EQ(m.sessions("a1"), 2u);
    EXPECT_EQ(m.counters().events_received, 4u);
    EXPECT_EQ(m.counters().datagrams_received, 2u);
    EXPECT_EQ(m.counters().events_missed, 0u);
    EXPECT_TRUE(m.knows("a1"));
    EXPECT_FALSE(m.knows("a2"));
}

TEST(SessionMirror, ADuplicateChangesNothingAndAnOverlapAppliesOnlyWhatIsNew) {
    SessionMirror m(100);
    m.apply(events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 1), ev(SessionEvent::opened, 2)}));
    EXPECT_FALSE(m.apply(events_dgram("a1", 9, 0, {ev(SessionEvent::closed, 1), ev(SessionEvent::closed, 2)})));
    EXPECT_EQ(m.sessions("a1"), 2u);
    EXPECT_EQ(m.counters().duplicates, 1u);
    // seq 1..2: event 1 (the close of port 2) was seen already as an open; only seq 2 is new.
    EXPECT_FALSE(m.apply(events_dgram("a1", 9, 1, {ev(SessionEvent::closed, 2), ev(SessionEvent::opened, 5)})));
    EXPECT_EQ(m.sessions("a1"), 3u);
}

TEST(SessionMirror, AGapIsCountedAndAsksForAResync) {
    SessionMirror m(100);
    m.apply(events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 1)}));
    EXPECT_TRUE(m.apply(events_dgram("a1", 9, 4, {ev(SessionEvent::opened, 2)})));
    EXPECT_EQ(m.counters().events_missed, 3u);
    EXPECT_EQ(m.sessions("a1"), 2u);
    EXPECT_FALSE(m.apply(events_dgram("a1", 9, 5, {ev(SessionEvent::opened, 3)})));
}

TEST(SessionMirror, FirstWordFromARunPastItsStartAsksForAResyncAndANewRunStartsOver) {
    SessionMirror m(100);
    EXPECT_TRUE(m.apply(events_dgram("a1", 9, 50, {ev(SessionEvent::opened, 1)})));
    EXPECT_EQ(m.counters().events_missed, 0u);  // nothing to compare with yet
    m.apply(events_dgram("a1", 9, 51, {ev(SessionEvent::opened, 2)}));
    EXPECT_EQ(m.sessions("a1"), 2u);
    // The sender restarted (new boot): what it held is gone with it.
    EXPECT_FALSE(m.apply(events_dgram("a1", 10, 0, {ev(SessionEvent::opened, 7)})));
    EXPECT_EQ(m.sessions("a1"), 1u);
}

TEST(SessionMirror, ASnapshotReplacesTheTableAndEventsFollowOnWithoutAGap) {
    SessionMirror m(100);
    m.apply(events_dgram("a1", 9, 10, {ev(SessionEvent::opened, 1)}));
    SyncDatagram s1 = events_dgram("a1", 9, 20, {ev(SessionEvent::opened, 100), ev(SessionEvent::opened, 101)});
    s1.kind = SyncDatagram::Kind::snapshot;
    s1.flags = SyncDatagram::kFirst;
    SyncDatagram s2 = events_dgram("a1", 9, 20, {ev(SessionEvent::opened, 102)});
    s2.kind = SyncDatagram::Kind::snapshot;
    s2.flags = SyncDatagram::kLast;
    s2.part = 1;
    EXPECT_FALSE(m.apply(s1));
    EXPECT_FALSE(m.synced("a1")) << "its last part is still to come";
    EXPECT_FALSE(m.apply(s2));
    EXPECT_TRUE(m.synced("a1"));
    EXPECT_EQ(m.sessions("a1"), 3u);  // port 1's session was not in the sender's table
    EXPECT_FALSE(m.apply(events_dgram("a1", 9, 20, {ev(SessionEvent::closed, 100)})));
    EXPECT_EQ(m.counters().events_missed, 0u);
    EXPECT_EQ(m.sessions("a1"), 2u);
    // An empty snapshot says the sender holds nothing.
    SyncDatagram empty = events_dgram("a1", 9, 21, {});
    empty.kind = SyncDatagram::Kind::snapshot;
    empty.flags = SyncDatagram::kFirst | SyncDatagram::kLast;
    m.apply(empty);
    EXPECT_EQ(m.sessions("a1"), 0u);
    EXPECT_TRUE(m.knows("a1"));
}

TEST(SessionMirror, ASnapshotWithAPartMissingAsksAgainAndIsNotSynced) {
    SessionMirror m(100);
    SyncDatagram p0 = events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 1)});
    p0.kind = SyncDatagram::Kind::snapshot;
    p0.flags = SyncDatagram::kFirst;
    SyncDatagram p2 = events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 3)});
    p2.kind = SyncDatagram::Kind::snapshot;
    p2.flags = SyncDatagram::kLast;
    p2.part = 2;  // part 1 was lost
    EXPECT_FALSE(m.apply(p0));
    EXPECT_TRUE(m.apply(p2)) << "a part out of order asks for the table again";
    EXPECT_FALSE(m.synced("a1"));
    EXPECT_EQ(m.counters().snapshot_parts_missed, 1u);
    EXPECT_EQ(m.sessions("a1"), 1u) << "nothing of the broken snapshot after the gap is applied";
    // A part with no first part before it is refused the same way.
    SyncDatagram stray = p2;
    stray.part = 1;
    EXPECT_TRUE(m.apply(stray));
}

TEST(SessionMirror, AnEmptyEventsDatagramShowsAGap) {
    SessionMirror m(100);
    m.apply(events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 1)}));
    EXPECT_FALSE(m.apply(events_dgram("a1", 9, 1, {}))) << "in step: nothing missed";
    EXPECT_TRUE(m.apply(events_dgram("a1", 9, 4, {}))) << "the sender lost or sent 3 we never saw";
    EXPECT_EQ(m.counters().events_missed, 3u);
}

TEST(SessionMirror, HoldsNoMoreThanItsBoundAndCountsTheRest) {
    SessionMirror m(3);
    std::vector<SessionEvent> e;
    for (uint16_t i = 0; i < 5; ++i) e.push_back(ev(SessionEvent::opened, i));
    m.apply(events_dgram("a1", 9, 0, e));
    EXPECT_EQ(m.total(), 3u);
    EXPECT_EQ(m.counters().full, 2u);
    // An update of one it holds still applies, and a close makes room.
    m.apply(events_dgram("a1", 9, 5, {ev(SessionEvent::opened, 0, 99), ev(SessionEvent::closed, 1),
                                      ev(SessionEvent::opened, 4)}));
    EXPECT_EQ(m.total(), 3u);
    EXPECT_EQ(m.counters().full, 2u);
}

TEST(SessionMirror, MembersAreKeptApart) {
    SessionMirror m(100);
    m.apply(events_dgram("a1", 9, 0, {ev(SessionEvent::opened, 1)}));
    m.apply(events_dgram("a3", 4, 0, {ev(SessionEvent::opened, 1), ev(SessionEvent::opened, 2)}));
    EXPECT_EQ(m.sessions("a1"), 1u);
    EXPECT_EQ(m.sessions("a3"), 2u);
    EXPECT_EQ(m.total(), 3u);
    const auto j = m.from_json();
    ASSERT_EQ(j.size(), 2u);
    EXPECT_EQ(j[1]["member"], "a3");
    EXPECT_EQ(j[1]["sessions"], 2);
}

}  // namespace
}  // namespace fedgate
