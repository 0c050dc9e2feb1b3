// Writes seed inputs for the fuzzers: packets from the test builder (fuzz_packet, fuzz_nat) and
// resolution messages of every type, peer messages sealed with the fuzz key (fuzz_resolve).
#include <cstring>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dataplane/peer_auth.hpp"
#include "proto/conn_wire.hpp"
#include "proto/resolve_wire.hpp"
#include "tests/support/packet_builder.hpp"

namespace {

using fedgate::test::PacketBuilder;
using Bytes = std::vector<uint8_t>;

std::vector<Bytes> packet_seeds() {
    const fedgate::test::Mac a{2, 0, 0, 0, 0, 1}, b{2, 0, 0, 0, 0, 2};
    return {
        PacketBuilder().eth(fedgate::test::kBroadcast, a).arp(1, a, "198.18.1.10", {}, "198.18.1.1").build(),
        PacketBuilder().eth(b, a).ipv4("198.18.1.10", "198.18.1.1").icmp(8, 0, 1, 1).payload(56).build(),
        PacketBuilder().eth(b, a).ipv4("198.18.1.10", "198.18.2.10").udp(1000, 53).payload(20).build(),
        PacketBuilder().eth(b, a).ipv4("198.18.1.10", "198.18.2.10").tcp(1000, 80).payload(20).build(),
        PacketBuilder().eth(b, a).vlan(5).vlan(6).ipv4("198.18.1.10", "198.18.1.1").fragment(true, 0).udp(1, 2).build(),
        // RoCE v2: RC SEND ONLY, and an ACK with a UDP checksum (the fuzzer translates them).
        PacketBuilder().eth(b, a).ipv4("198.18.1.10", "198.18.1.1").udp(49152, 4791).udp_no_checksum()
            .bth(0x04, 0x4000, 7).payload(32).icrc().build(),
        PacketBuilder().eth(b, a).ipv4("198.19.0.2", "198.19.0.1").udp(49153, 4791).bth(0x11, 0x4001, 8)
            .payload(4).icrc().build(),
    };
}

// ---------------------------------------------------------------------------------------------
// Resolution messages. These three must match tests/fuzz/fuzz_resolve.cpp.
constexpr std::string_view kFuzzKey = "fedgate fuzz peer key, 32 bytes";
constexpr uint64_t kFuzzNow = 1'700'000'000'000'000'000;
constexpr std::string_view kResolveMarker = "\xfeRES";

using namespace fedgate;

template <typename T>
Bytes raw(const T& t) {
    const auto* p = reinterpret_cast<const uint8_t*>(&t);
    return Bytes(p, p + sizeof t);
}

Bytes cat(Bytes a, const Bytes& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

DmaAddressWire record(uint32_t local, Transport t) {
    DmaAddress a;
    a.pid = ProcessId::make(2, 1, local);
    a.epoch = 7;
    a.transport = t;
    a.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, 0, static_cast<uint8_t>(local)};
    a.qpn = 0x123456;
    a.mtu = 4096;
    a.ipv4 = 0xc6120a00 | (local & 0xff);  // 198.18.10.x
    a.port = 18515;
    a.ttl_s = 60;
    DmaAddressWire w;
    encode(a, w);
    return w;
}

// header | body | (sealed MAC, peer messages)
Bytes message(MsgType type, uint64_t seq, uint8_t channel, const Bytes& body) {
    const bool peer = is_peer_message(type);
    MsgHeader h;
    encode(Header{.type = type, .sender_party = static_cast<uint16_t>(peer ? 2 : 0),
                  .body_len = static_cast<uint16_t>(body.size()), .seq = seq, .channel = channel},
           h);
    Bytes d = cat(raw(h), body);
    if (peer) {
        d.resize(d.size() + kMacLen);
        HmacKey(std::span(reinterpret_cast<const uint8_t*>(kFuzzKey.data()), kFuzzKey.size())).seal(d);
    }
    return d;
}

Bytes stream_body(uint64_t stream, uint64_t seq, uint16_t count, uint8_t flags) {
    StreamBody s{};
    store_be64(s.stream, stream);
    store_be64(s.seq, seq);
    store_be16(s.count, count);
    s.flags = flags;
    return raw(s);
}

Bytes process_ref(uint32_t local) {
    ProcessRefBody r{};
    store_be64(r.pid, ProcessId::make(2, 1, local).value);
    store_be32(r.epoch, 7);
    return raw(r);
}

std::vector<Bytes> resolve_seeds() {
    uint64_t seq = kFuzzNow;
    auto next = [&seq] { return seq += 1000; };

    RegReplyBody reg_reply{};
    reg_reply.status = static_cast<uint8_t>(RegStatus::ok);
    store_be64(reg_reply.pid, ProcessId::make(2, 1, 1).value);
    store_be32(reg_reply.epoch, 7);
    store_be32(reg_reply.heartbeat_ms, 1000);
    ResolveBody resolve{};
    store_be64(resolve.target, ProcessId::make(0, 1, 1).value);
    ResolveReplyBody resolve_reply{};
    resolve_reply.status = static_cast<uint8_t>(ResolveStatus::ok);
    resolve_reply.source = static_cast<uint8_t>(AnswerSource::broadcast);
    store_be64(resolve_reply.target, ProcessId::make(0, 1, 1).value);
    resolve_reply.record = record(1, Transport::roce_v2);
    QueryBody query{};
    store_be64(query.query_id, 99);
    store_be64(query.target, ProcessId::make(0, 1, 1).value);
    query.mode = static_cast<uint8_t>(QueryMode::broadcast);
    AnswerBody answer{};
    store_be64(answer.query_id, 99);
    store_be64(answer.target, ProcessId::make(0, 1, 1).value);
    answer.found = 1;
    answer.record = record(1, Transport::roce_v2);
    AckBody ack{};
    store_be64(ack.stream, 0x5eed);
    store_be64(ack.acked, 1);
    SyncBody sync{};
    store_be64(sync.stream, 0x5eed);
    store_be64(sync.last_seq, 2);
    store_be32(sync.records, 2);

    const Bytes announce = message(MsgType::announce, next(), 1,
                                   cat(cat(stream_body(0x5eed, 1, 2, kStreamSnapshot), raw(record(1, Transport::roce_v2))),
                                       raw(record(2, Transport::tcp))));
    const Bytes withdraw =
        message(MsgType::withdraw, next(), 1, cat(cat(stream_body(0x5eed, 2, 2, 0), process_ref(1)), process_ref(2)));
    const Bytes ack_msg = message(MsgType::ack, next(), 1, raw(ack));
    const Bytes query_msg = message(MsgType::query, next(), 0, raw(query));
    const Bytes answer_msg = message(MsgType::answer, next(), 0, raw(answer));
    const Bytes sync_msg = message(MsgType::sync, next(), 1, raw(sync));

    // Later datagrams of one input: marker, control byte (bit 0 reseal, bits 1-7 clock step), datagram.
    auto then = [](Bytes in, uint8_t control, const Bytes& d) {
        in.insert(in.end(), kResolveMarker.begin(), kResolveMarker.end());
        in.push_back(control);
        return cat(std::move(in), d);
    };
    ConnParams hs;  // a handshake, as REQ from a process and relayed between gateways
    hs.conn_id = 0xc0ffee;
    hs.initiator = ProcessId::make(1, 3, 100);
    hs.target = ProcessId::make(2, 7, 42);
    hs.caps = kCapAll;
    hs.qpn = 0x1234;
    hs.psn = 0xabcdef;
    hs.mtu = 1024;
    ConnBody conn{};
    encode(hs, conn);
    return {
        message(MsgType::conn_req, 0, 0, raw(conn)),
        message(MsgType::hs_req, next(), 1, raw(conn)),
        message(MsgType::hs_rep, next(), 1, raw(conn)),
        message(MsgType::reg, 1, 0, raw(record(1, Transport::roce_v2))),
        message(MsgType::heartbeat, 2, 0, process_ref(1)),
        message(MsgType::deregister, 3, 0, process_ref(1)),
        message(MsgType::resolve, 4, 0, raw(resolve)),
        message(MsgType::reg_reply, 1, 0, raw(reg_reply)),
        message(MsgType::resolve_reply, 4, 0, raw(resolve_reply)),
        query_msg,
        answer_msg,
        announce,
        withdraw,
        ack_msg,
        sync_msg,
        message(MsgType::announce, next(), 1, stream_body(0x5eed, 3, 0, 0)),  // empty stream messages
        message(MsgType::withdraw, next(), 1, stream_body(0x5eed, 4, 0, 0)),
        // A conversation: in order, out of order within the window, a replay, then one 2 s late (stale).
        then(then(then(then(announce, 0, ack_msg), 0, withdraw), 0, withdraw), 0xfe, sync_msg),
        // The other channel, and a resealed replay.
        then(then(query_msg, 0, answer_msg), 1, query_msg),
    };
}

}  // namespace

int main(int argc, char** argv) {
    const std::string kind = argc == 3 ? argv[2] : "packet";
    if ((argc != 2 && argc != 3) || (kind != "packet" && kind != "resolve")) {
        std::cerr << "usage: make_seeds DIR [packet|resolve]\n";
        return 2;
    }
    const std::vector<Bytes> seeds = kind == "packet" ? packet_seeds() : resolve_seeds();
    for (std::size_t i = 0; i < seeds.size(); ++i) {
        std::ofstream f(std::string(argv[1]) + "/seed" + std::to_string(i), std::ios::binary);
        f.write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
    }
    return 0;
}
