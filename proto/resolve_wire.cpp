// Encoding, decoding and checking of the resolution service's wire formats (no DPDK).
#include "proto/resolve_wire.hpp"

#include "proto/conn_wire.hpp"

#include <charconv>
#include <cstdio>
#include <cstring>

namespace fedgate {
namespace {

template <typename T>
bool parse_decimal(std::string_view s, T max, T& out) {
    if (s.empty() || s.size() > 10) return false;
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
    if (ec != std::errc{} || end != s.data() + s.size() || v > max) return false;
    out = static_cast<T>(v);
    return true;
}

}  // namespace

std::optional<ProcessId> parse_process_id(std::string_view s) {
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        const std::string_view hex = s.substr(2);
        if (hex.size() > 16) return std::nullopt;
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
        if (ec != std::errc{} || end != hex.data() + hex.size()) return std::nullopt;
        return ProcessId{v};
    }
    const std::size_t d1 = s.find('.');
    if (d1 == std::string_view::npos) return std::nullopt;
    const std::size_t d2 = s.find('.', d1 + 1);
    if (d2 == std::string_view::npos || s.find('.', d2 + 1) != std::string_view::npos) return std::nullopt;
    uint16_t party = 0, node = 0;
    uint32_t local = 0;
    if (!parse_decimal<uint16_t>(s.substr(0, d1), UINT16_MAX, party) ||
        !parse_decimal<uint16_t>(s.substr(d1 + 1, d2 - d1 - 1), UINT16_MAX, node) ||
        !parse_decimal<uint32_t>(s.substr(d2 + 1), UINT32_MAX, local))
        return std::nullopt;
    return ProcessId::make(party, node, local);
}

std::string format_process_id(ProcessId id) {
    return std::to_string(id.party()) + "." + std::to_string(id.node()) + "." + std::to_string(id.local());
}

const char* transport_name(Transport t) {
    switch (t) {
    case Transport::roce_v2: return "roce_v2";
    case Transport::tcp: return "tcp";
    }
    return "?";
}

std::optional<Transport> parse_transport(std::string_view s) {
    if (s == "roce_v2") return Transport::roce_v2;
    if (s == "tcp") return Transport::tcp;
    return std::nullopt;
}

void encode(const DmaAddress& a, DmaAddressWire& w) {
    std::memset(&w, 0, sizeof w);
    store_be64(w.pid, a.pid.value);
    store_be32(w.epoch, a.epoch);
    w.transport = static_cast<uint8_t>(a.transport);
    w.flags = a.flags;
    store_be16(w.mtu, a.mtu);
    std::memcpy(w.gid, a.gid.data(), sizeof w.gid);
    store_be32(w.qpn, a.qpn);
    store_be32(w.ipv4, a.ipv4);
    store_be16(w.port, a.port);
    store_be32(w.ttl_s, a.ttl_s);
}

std::optional<DmaAddress> decode(const DmaAddressWire& w) {
    DmaAddress a;
    a.pid = ProcessId{load_be64(w.pid)};
    a.epoch = load_be32(w.epoch);
    if (w.transport != static_cast<uint8_t>(Transport::roce_v2) && w.transport != static_cast<uint8_t>(Transport::tcp))
        return std::nullopt;
    a.transport = static_cast<Transport>(w.transport);
    a.flags = w.flags;
    a.mtu = load_be16(w.mtu);
    std::memcpy(a.gid.data(), w.gid, sizeof w.gid);
    a.qpn = load_be32(w.qpn);
    if (a.qpn > kMaxQpn || w.reserved[0] != 0 || w.reserved[1] != 0) return std::nullopt;
    a.ipv4 = load_be32(w.ipv4);
    a.port = load_be16(w.port);
    a.ttl_s = load_be32(w.ttl_s);
    return a;
}

const char* msg_type_name(MsgType t) {
    switch (t) {
    case MsgType::reg: return "register";
    case MsgType::heartbeat: return "heartbeat";
    case MsgType::deregister: return "deregister";
    case MsgType::resolve: return "resolve";
    case MsgType::reg_reply: return "reg_reply";
    case MsgType::resolve_reply: return "resolve_reply";
    case MsgType::query: return "query";
    case MsgType::answer: return "answer";
    case MsgType::announce: return "announce";
    case MsgType::withdraw: return "withdraw";
    case MsgType::ack: return "ack";
    case MsgType::sync: return "sync";
    case MsgType::conn_req: return "conn_req";
    case MsgType::conn_rep: return "conn_rep";
    case MsgType::conn_rtu: return "conn_rtu";
    case MsgType::hs_req: return "hs_req";
    case MsgType::hs_rep: return "hs_rep";
    case MsgType::hs_rtu: return "hs_rtu";
    }
    return "?";
}

std::size_t fixed_body_size(MsgType t) {
    switch (t) {
    case MsgType::reg: return sizeof(RegisterBody);
    case MsgType::heartbeat:
    case MsgType::deregister: return sizeof(ProcessRefBody);
    case MsgType::resolve: return sizeof(ResolveBody);
    case MsgType::reg_reply: return sizeof(RegReplyBody);
    case MsgType::resolve_reply: return sizeof(ResolveReplyBody);
    case MsgType::query: return sizeof(QueryBody);
    case MsgType::answer: return sizeof(AnswerBody);
    case MsgType::announce:
    case MsgType::withdraw: return 0;
    case MsgType::ack: return sizeof(AckBody);
    case MsgType::sync: return sizeof(SyncBody);
    case MsgType::conn_req:
    case MsgType::conn_rep:
    case MsgType::conn_rtu:
    case MsgType::hs_req:
    case MsgType::hs_rep:
    case MsgType::hs_rtu: return sizeof(ConnBody);
    }
    return 0;
}

void encode(const Header& h, MsgHeader& w) {
    std::memset(&w, 0, sizeof w);
    store_be16(w.magic, kMsgMagic);
    w.version = kMsgVersion;
    w.type = static_cast<uint8_t>(h.type);
    store_be16(w.sender_party, h.sender_party);
    store_be16(w.body_len, h.body_len);
    store_be64(w.seq, h.seq);
    w.channel = h.channel;
    w.key_id = h.key_id;
}

const char* wire_error_name(WireError e) {
    switch (e) {
    case WireError::ok: return "ok";
    case WireError::truncated: return "truncated";
    case WireError::bad_magic: return "bad_magic";
    case WireError::bad_version: return "bad_version";
    case WireError::bad_type: return "bad_type";
    case WireError::bad_length: return "bad_length";
    case WireError::bad_body: return "bad_body";
    }
    return "?";
}

namespace {

bool known_type(uint8_t t) { return (t >= 1 && t <= 9) || (t >= 16 && t <= 24); }

// Stream bodies: the header, then `count` whole entries of the message's kind, nothing more.
bool stream_body_ok(MsgType t, std::span<const uint8_t> body) {
    if (body.size() < sizeof(StreamBody)) return false;
    StreamBody sb;
    std::memcpy(&sb, body.data(), sizeof sb);
    const std::size_t entry = t == MsgType::announce ? sizeof(DmaAddressWire) : sizeof(ProcessRefBody);
    return body.size() == sizeof(StreamBody) + load_be16(sb.count) * entry && sb.reserved == 0;
}

}  // namespace

WireError parse_message(std::span<const uint8_t> d, ParsedMsg& out) {
    if (d.size() < sizeof(MsgHeader)) return WireError::truncated;
    MsgHeader w;
    std::memcpy(&w, d.data(), sizeof w);
    if (load_be16(w.magic) != kMsgMagic) return WireError::bad_magic;
    if (w.version != kMsgVersion) return WireError::bad_version;
    if (!known_type(w.type)) return WireError::bad_type;
    Header& h = out.header;
    h.type = static_cast<MsgType>(w.type);
    h.sender_party = load_be16(w.sender_party);
    h.body_len = load_be16(w.body_len);
    h.seq = load_be64(w.seq);
    h.channel = w.channel;
    h.key_id = w.key_id;
    if (w.reserved[0] != 0 || w.reserved[1] != 0) return WireError::bad_length;
    if (!is_peer_message(h.type) && h.key_id != 0) return WireError::bad_length;  // no key: no key ID
    const std::size_t mac = is_peer_message(h.type) ? kMacLen : 0;
    if (h.body_len > kMaxBody) return WireError::bad_length;
    if (d.size() < sizeof(MsgHeader) + h.body_len + mac) return WireError::truncated;
    if (d.size() != sizeof(MsgHeader) + h.body_len + mac) return WireError::bad_length;
    out.body = d.subspan(sizeof(MsgHeader), h.body_len);
    out.mac = d.subspan(sizeof(MsgHeader) + h.body_len, mac);
    out.authenticated = d.subspan(0, sizeof(MsgHeader) + h.body_len);
    if (const std::size_t fixed = fixed_body_size(h.type); fixed != 0) {
        if (h.body_len != fixed) return WireError::bad_body;
    } else if (!stream_body_ok(h.type, out.body)) {
        return WireError::bad_body;
    }
    return WireError::ok;
}

const char* resolve_status_name(ResolveStatus s) {
    switch (s) {
    case ResolveStatus::ok: return "ok";
    case ResolveStatus::not_found: return "not_found";
    case ResolveStatus::unreachable: return "unreachable";
    case ResolveStatus::rate_limited: return "rate_limited";
    case ResolveStatus::bad_request: return "bad_request";
    case ResolveStatus::busy: return "busy";
    }
    return "?";
}

const char* reg_status_name(RegStatus s) {
    switch (s) {
    case RegStatus::ok: return "ok";
    case RegStatus::wrong_party: return "wrong_party";
    case RegStatus::address_mismatch: return "address_mismatch";
    case RegStatus::unknown: return "unknown";
    case RegStatus::stale_epoch: return "stale_epoch";
    case RegStatus::bad_record: return "bad_record";
    case RegStatus::full: return "full";
    case RegStatus::store_unavailable: return "store_unavailable";
    }
    return "?";
}

const char* answer_source_name(AnswerSource s) {
    switch (s) {
    case AnswerSource::cache: return "cache";
    case AnswerSource::local: return "local";
    case AnswerSource::directed: return "directed";
    case AnswerSource::broadcast: return "broadcast";
    case AnswerSource::negative_cache: return "negative_cache";
    }
    return "?";
}

}  // namespace fedgate

// ---------------------------------------------------------------------------------------------
// The connection handshake (conn_wire.hpp).

namespace fedgate {

const char* conn_status_name(ConnStatus s) {
    switch (s) {
    case ConnStatus::ok: return "ok";
    case ConnStatus::unknown_initiator: return "unknown_initiator";
    case ConnStatus::unknown_target: return "unknown_target";
    case ConnStatus::not_listening: return "not_listening";
    case ConnStatus::transport_mismatch: return "transport_mismatch";
    case ConnStatus::no_peer: return "no_peer";
    case ConnStatus::busy: return "busy";
    case ConnStatus::no_mapping: return "no_mapping";
    case ConnStatus::bad_request: return "bad_request";
    case ConnStatus::wrong_party: return "wrong_party";
    }
    return "?";
}

uint8_t transport_cap(Transport t) { return t == Transport::roce_v2 ? kCapRdma : kCapTcp; }

std::optional<Transport> choose_transport(uint8_t caps_a, uint8_t caps_b) {
    const uint8_t both = caps_a & caps_b;
    if (both & kCapRdma) return Transport::roce_v2;
    if (both & kCapTcp) return Transport::tcp;
    return std::nullopt;
}

std::optional<uint32_t> gid_ipv4(const std::array<uint8_t, 16>& gid) {
    for (int i = 0; i < 10; ++i)
        if (gid[i] != 0) return std::nullopt;
    if (gid[10] != 0xff || gid[11] != 0xff) return std::nullopt;
    return uint32_t{gid[12]} << 24 | uint32_t{gid[13]} << 16 | uint32_t{gid[14]} << 8 | gid[15];
}

std::array<uint8_t, 16> ipv4_gid(uint32_t host_addr) {
    std::array<uint8_t, 16> g{};
    g[10] = g[11] = 0xff;
    g[12] = static_cast<uint8_t>(host_addr >> 24);
    g[13] = static_cast<uint8_t>(host_addr >> 16);
    g[14] = static_cast<uint8_t>(host_addr >> 8);
    g[15] = static_cast<uint8_t>(host_addr);
    return g;
}

std::string format_conn_id(uint64_t id) {
    char buf[19];
    std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(id));
    return buf;
}

bool valid_rdma_mtu(uint16_t mtu) { return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096; }

uint16_t negotiate_mtu(uint16_t a, uint16_t b) {
    if (a == 0) return b;
    if (b == 0) return a;
    return a < b ? a : b;
}

ConnParams conn_refusal(const ConnParams& req, ConnStatus why) {
    ConnParams r;
    r.conn_id = req.conn_id;
    r.initiator = req.initiator;
    r.target = req.target;
    r.status = why;
    return r;
}

void encode(const ConnParams& p, ConnBody& w) {
    std::memset(&w, 0, sizeof w);
    store_be64(w.conn_id, p.conn_id);
    store_be64(w.initiator, p.initiator.value);
    store_be64(w.target, p.target.value);
    w.status = static_cast<uint8_t>(p.status);
    w.caps = p.caps;
    store_be32(w.qpn, p.qpn);
    store_be32(w.psn, p.psn);
    store_be16(w.mtu, p.mtu);
    store_be16(w.port, p.port);
    store_be32(w.ipv4, p.ipv4);
    std::memcpy(w.gid, p.gid.data(), sizeof w.gid);
    store_be32(w.rkey, p.rkey);
    store_be64(w.raddr, p.raddr);
    store_be32(w.rlen, p.rlen);
}

std::optional<ConnParams> decode(const ConnBody& w) {
    ConnParams p;
    p.conn_id = load_be64(w.conn_id);
    p.initiator = ProcessId{load_be64(w.initiator)};
    p.target = ProcessId{load_be64(w.target)};
    if (p.conn_id == 0 || p.initiator.value == 0 || p.target.value == 0) return std::nullopt;
    if (w.status > static_cast<uint8_t>(ConnStatus::wrong_party)) return std::nullopt;
    p.status = static_cast<ConnStatus>(w.status);
    if ((w.caps & ~kCapAll) != 0 || w.reserved[0] != 0 || w.reserved[1] != 0) return std::nullopt;
    p.caps = w.caps;
    p.qpn = load_be32(w.qpn);
    p.psn = load_be32(w.psn);
    if (p.qpn > kMaxQpn || p.psn > kMaxPsn) return std::nullopt;
    p.mtu = load_be16(w.mtu);
    p.port = load_be16(w.port);
    p.ipv4 = load_be32(w.ipv4);
    std::memcpy(p.gid.data(), w.gid, sizeof w.gid);
    p.rkey = load_be32(w.rkey);
    p.raddr = load_be64(w.raddr);
    p.rlen = load_be32(w.rlen);
    return p;
}

}  // namespace fedgate
