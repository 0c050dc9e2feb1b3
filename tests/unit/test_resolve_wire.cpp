// The resolution service's wire formats: process IDs, DMA address records, message framing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "proto/resolve_wire.hpp"

namespace fedgate {
namespace {

TEST(ProcessId, DottedFormRoundTrips) {
    const auto id = parse_process_id("2.7.42");
    ASSERT_TRUE(id);
    EXPECT_EQ(id->party(), 2);
    EXPECT_EQ(id->node(), 7);
    EXPECT_EQ(id->local(), 42u);
    EXPECT_EQ(id->value, 0x0002000700000000ull + 42);
    EXPECT_EQ(format_process_id(*id), "2.7.42");
    EXPECT_EQ(format_process_id(*parse_process_id("65535.65535.4294967295")), "65535.65535.4294967295");
}

TEST(ProcessId, HexFormGivesTheSameId) {
    EXPECT_EQ(parse_process_id("0x000200070000002a"), parse_process_id("2.7.42"));
    EXPECT_EQ(parse_process_id("0X2a")->value, 42u);
    EXPECT_EQ(parse_process_id("0xffffffffffffffff")->value, UINT64_MAX);
}

TEST(ProcessId, RejectsEverythingElse) {
    for (const char* bad : {"", "1", "1.2", "1.2.3.4", "65536.0.0", "0.65536.0", "0.0.4294967296", "a.b.c", "1..2",
                            ".1.2", "1.2.", "-1.2.3", "+1.2.3", " 1.2.3", "1.2.3 ", "0x", "0x1ffffffffffffffff",
                            "0xg", "0x-1", "00000000001.2.3"})
        EXPECT_FALSE(parse_process_id(bad)) << bad;
}

TEST(ProcessId, PartyZeroMeansOwnerUnknown) {
    const ProcessId id = *parse_process_id("0.7.42");
    EXPECT_EQ(id.party(), 0);
    EXPECT_EQ(id.with_party(3), *parse_process_id("3.7.42"));
}

// How the IDs of a run fall over 2^bits homes: the longest chain and the entries a hit walks on
// average (each entry of a chain of n costs 1..n, (n + 1) / 2 on average).
struct Spread {
    std::size_t longest = 0;
    double walk = 0;
};
Spread spread_of(const std::vector<ProcessId>& ids, unsigned bits) {
    std::vector<uint32_t> chain(std::size_t{1} << bits);
    for (const ProcessId id : ids) {
        const std::size_t h = id.home(bits);
        EXPECT_LT(h, chain.size());
        if (h < chain.size()) ++chain[h];
    }
    Spread s;
    for (const uint32_t n : chain) {
        s.longest = std::max<std::size_t>(s.longest, n);
        s.walk += n * (n + 1) / 2.0;
    }
    s.walk /= static_cast<double>(ids.size());
    return s;
}

// The resolution cache's buckets and the resolver's pending index take their homes from home():
// IDs arrive in runs (a node's locals one after another; nodes, parties), and a run must not crowd
// into a few homes, or every hit walks a chain of cache lines (65,536 sequential locals in 2^17
// buckets by the product's middle bits: chains of up to 5, 2.8 entries walked a hit).
TEST(ProcessId, HomeSpreadsRunsOfIdsOverTheTable) {
    std::vector<ProcessId> seq, nodes, parties;
    for (uint32_t i = 0; i < 65536; ++i) seq.push_back(ProcessId::make(1, 1, i));
    for (uint16_t n = 0; n < 256; ++n)
        for (uint32_t i = 0; i < 256; ++i) nodes.push_back(ProcessId::make(1, n, i));
    for (uint16_t p = 1; p <= 3; ++p)
        for (uint16_t n = 0; n < 100; ++n)
            for (uint32_t i = 0; i < 218; ++i) parties.push_back(ProcessId::make(p, n, i));
    for (const auto* run : {&seq, &nodes, &parties}) {
        const Spread s = spread_of(*run, 17);  // twice the entries, as the cache's default capacity gives
        EXPECT_LE(s.longest, 2u) << run->size() << " IDs";
        EXPECT_LT(s.walk, 1.15) << run->size() << " IDs";
    }
    // Small tables too (the pending index starts at 2 homes): 64 sequential IDs over 16 homes use
    // every one of them, none more than 5 times; and a home is always inside its table.
    std::vector<ProcessId> few;
    for (uint32_t i = 0; i < 64; ++i) few.push_back(ProcessId::make(1, 1, i));
    std::vector<uint32_t> per_home(16);
    for (const ProcessId id : few) ++per_home.at(id.home(4));
    EXPECT_EQ(std::count(per_home.begin(), per_home.end(), 0u), 0);
    EXPECT_LE(*std::max_element(per_home.begin(), per_home.end()), 5u);
    for (const uint64_t v : {uint64_t{0}, uint64_t{1}, UINT64_MAX, uint64_t{0x8000000000000000}})
        for (const unsigned bits : {1u, 17u, 63u}) EXPECT_LT(ProcessId{v}.home(bits), std::size_t{1} << bits);
}

DmaAddress sample_record() {
    DmaAddress a;
    a.pid = ProcessId::make(2, 7, 42);
    a.epoch = 0xdeadbeef;
    a.transport = Transport::roce_v2;
    a.flags = 0x5a;
    for (uint8_t i = 0; i < 16; ++i) a.gid[i] = static_cast<uint8_t>(0xf0 + i);
    a.qpn = 0xabcdef;
    a.mtu = 4096;
    a.ipv4 = 0xc6120a0b;  // 198.18.10.11
    a.port = 4791;
    a.ttl_s = 600;
    return a;
}

TEST(DmaAddressWire, EncodesEveryFieldBigEndianAtItsOffset) {
    DmaAddressWire w;
    encode(sample_record(), w);
    const auto* b = reinterpret_cast<const uint8_t*>(&w);
    const uint8_t expect[48] = {0x00, 0x02, 0x00, 0x07, 0x00, 0x00, 0x00, 0x2a,  // pid
                                0xde, 0xad, 0xbe, 0xef,                          // epoch
                                0x01, 0x5a, 0x10, 0x00,                          // transport, flags, mtu
                                0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,  // gid
                                0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,  //
                                0x00, 0xab, 0xcd, 0xef,                          // qpn
                                0xc6, 0x12, 0x0a, 0x0b, 0x12, 0xb7,              // ipv4, port
                                0x00, 0x00, 0x00, 0x00, 0x02, 0x58};             // reserved, ttl
    EXPECT_EQ(std::memcmp(b, expect, sizeof expect), 0);
    const auto back = decode(w);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, sample_record());
}

TEST(DmaAddressWire, DecodeRejectsUnknownTransportWideQpnAndReservedBytes) {
    DmaAddressWire w;
    encode(sample_record(), w);
    DmaAddressWire bad = w;
    bad.transport = 9;
    EXPECT_FALSE(decode(bad));
    bad = w;
    bad.qpn[0] = 1;
    EXPECT_FALSE(decode(bad));
    bad = w;
    bad.reserved[1] = 1;
    EXPECT_FALSE(decode(bad));
}

std::vector<uint8_t> frame(const Header& h, const std::vector<uint8_t>& body, std::size_t mac = 0) {
    std::vector<uint8_t> d(sizeof(MsgHeader) + body.size() + mac, 0xee);
    Header hh = h;
    hh.body_len = static_cast<uint16_t>(body.size());
    MsgHeader w;
    encode(hh, w);
    std::memcpy(d.data(), &w, sizeof w);
    std::memcpy(d.data() + sizeof w, body.data(), body.size());
    return d;
}

TEST(ParseMessage, ClientMessageHasNoMac) {
    const Header h{MsgType::resolve, 0, 0, 0x1122334455667788ull, 0};
    const auto d = frame(h, std::vector<uint8_t>(sizeof(ResolveBody), 1));
    ParsedMsg m;
    ASSERT_EQ(parse_message(d, m), WireError::ok);
    EXPECT_EQ(m.header.type, MsgType::resolve);
    EXPECT_EQ(m.header.seq, 0x1122334455667788ull);
    EXPECT_EQ(m.body.size(), sizeof(ResolveBody));
    EXPECT_TRUE(m.mac.empty());
}

TEST(ParseMessage, PeerMessageCarriesMacAfterBody) {
    const Header h{MsgType::query, 3, 0, 99, 1};
    const auto d = frame(h, std::vector<uint8_t>(sizeof(QueryBody), 0), kMacLen);
    ParsedMsg m;
    ASSERT_EQ(parse_message(d, m), WireError::ok);
    EXPECT_EQ(m.header.sender_party, 3);
    EXPECT_EQ(m.header.channel, 1);
    EXPECT_EQ(m.mac.size(), kMacLen);
    EXPECT_EQ(m.mac.data(), d.data() + sizeof(MsgHeader) + sizeof(QueryBody));
    EXPECT_EQ(m.authenticated.size(), sizeof(MsgHeader) + sizeof(QueryBody));
}

TEST(ParseMessage, APeerMessageNamesItsKeyAndAClientMessageMayNot) {
    Header h{MsgType::query, 3, 0, 99, 1, 42};
    auto d = frame(h, std::vector<uint8_t>(sizeof(QueryBody), 0), kMacLen);
    EXPECT_EQ(d[kKeyIdOffset], 42);
    ParsedMsg m;
    ASSERT_EQ(parse_message(d, m), WireError::ok);
    EXPECT_EQ(m.header.key_id, 42);
    d[kKeyIdOffset + 1] = 1;  // the two bytes after it stay reserved
    EXPECT_EQ(parse_message(d, m), WireError::bad_length);
    const auto client = frame(Header{MsgType::resolve, 0, 0, 7, 0, 1}, std::vector<uint8_t>(sizeof(ResolveBody), 1));
    EXPECT_EQ(parse_message(client, m), WireError::bad_length);
}

TEST(ParseMessage, NamesWhatIsWrong) {
    const Header h{MsgType::query, 3, 0, 99, 0};
    const auto good = frame(h, std::vector<uint8_t>(sizeof(QueryBody), 0), kMacLen);
    ParsedMsg m;
    EXPECT_EQ(parse_message(std::span(good).first(10), m), WireError::truncated);
    EXPECT_EQ(parse_message(std::span(good).first(good.size() - 1), m), WireError::truncated);
    auto longer = good;
    longer.push_back(0);
    EXPECT_EQ(parse_message(longer, m), WireError::bad_length);
    auto bad = good;
    bad[0] = 0;
    EXPECT_EQ(parse_message(bad, m), WireError::bad_magic);
    bad = good;
    bad[2] = 2;
    EXPECT_EQ(parse_message(bad, m), WireError::bad_version);
    for (uint8_t t : {0, 10, 15, 25, 255}) {
        bad = good;
        bad[3] = t;
        EXPECT_EQ(parse_message(bad, m), WireError::bad_type) << int(t);
    }
    // A body of the wrong size for its type.
    const auto wrong_body = frame(h, std::vector<uint8_t>(sizeof(QueryBody) + 1, 0), kMacLen);
    EXPECT_EQ(parse_message(wrong_body, m), WireError::bad_body);
}

TEST(ParseMessage, StreamBodyMustHoldExactlyCountEntries) {
    std::vector<uint8_t> body(sizeof(StreamBody) + 2 * sizeof(DmaAddressWire), 0);
    store_be16(body.data() + offsetof(StreamBody, count), 2);
    const Header h{MsgType::announce, 2, 0, 5, 1};
    ParsedMsg m;
    EXPECT_EQ(parse_message(frame(h, body, kMacLen), m), WireError::ok);
    store_be16(body.data() + offsetof(StreamBody, count), 3);
    EXPECT_EQ(parse_message(frame(h, body, kMacLen), m), WireError::bad_body);
    const Header w{MsgType::withdraw, 2, 0, 5, 1};
    std::vector<uint8_t> wb(sizeof(StreamBody) + 3 * sizeof(ProcessRefBody), 0);
    store_be16(wb.data() + offsetof(StreamBody, count), 3);
    EXPECT_EQ(parse_message(frame(w, wb, kMacLen), m), WireError::ok);
    EXPECT_EQ(parse_message(frame(w, std::vector<uint8_t>(10, 0), kMacLen), m), WireError::bad_body);
}

TEST(ParseMessage, BatchesFitOneEthernetFrame) {
    EXPECT_LE(20 + 8 + sizeof(MsgHeader) + sizeof(StreamBody) + kMaxAnnouncePerMsg * sizeof(DmaAddressWire) + kMacLen,
              1500u);
    EXPECT_GE(kMaxAnnouncePerMsg, 28u);
}

}  // namespace
}  // namespace fedgate
