// libFuzzer target: resolution datagrams from a hostile node or peer gateway, through what the data
// plane does with each: parse_message, decode the body by type, verify the MAC, check the replay
// window and accept. Parsed spans lie exactly inside the datagram, the header re-encodes to the same
// bytes, records that decode re-encode to the same bytes, verify agrees with OpenSSL's one-shot
// HMAC, and the replay windows agree with a reference set of accepted sequence numbers (so nothing
// is ever accepted twice and nothing unseen in the window is called a replay).
//
// Input: datagrams separated by the marker "\xfeRES". Every datagram after the first starts with a
// control byte: bit 0 seals it with the fuzz key first (so mutated messages get past the MAC to the
// replay window); bits 1-7: how far the receiver's clock moves on before it arrives, in units of
// 2^24 ns (about 17 ms). The first datagram has no control byte and is checked as it is at
// kFuzzNow, so a raw sealed message (as fuzz_make_seeds writes it) is a seed by itself.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "proto/conn_wire.hpp"
#include "dataplane/peer_auth.hpp"
#include "proto/resolve_wire.hpp"

namespace {

using namespace fedgate;

// Shared with fuzz_make_seeds (tests/fuzz/make_seeds.cpp): its seeds are sealed with this key and
// stamped just after kFuzzNow.
constexpr std::string_view kFuzzKey = "fedgate fuzz peer key, 32 bytes";
constexpr uint64_t kFuzzNow = 1'700'000'000'000'000'000;  // ns since the epoch
constexpr uint64_t kMaxSkew = 1'000'000'000;               // 1 s: a few clock steps reach stale
constexpr char kMarker[] = "\xfeRES";
constexpr std::size_t kMarkerLen = sizeof kMarker - 1;
constexpr uint8_t kSealBit = 1;
constexpr unsigned kClockStepShift = 24;

void check(bool ok) {
    if (!ok) std::abort();
}

std::span<const uint8_t> key_bytes() { return {reinterpret_cast<const uint8_t*>(kFuzzKey.data()), kFuzzKey.size()}; }

const HmacKey& fuzz_key() {
    static const HmacKey k(key_bytes());
    return k;
}

bool inside(std::span<const uint8_t> part, std::span<const uint8_t> whole) {
    return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

// A decodable record re-encodes to exactly its bytes (decode refuses anything encode would not write).
void check_record(const uint8_t* p) {
    DmaAddressWire w;
    std::memcpy(&w, p, sizeof w);
    const std::optional<DmaAddress> a = decode(w);
    if (!a) return;
    DmaAddressWire again;
    encode(*a, again);
    check(std::memcmp(&again, &w, sizeof w) == 0);
    check(a->qpn <= kMaxQpn);
}

// A decodable handshake body re-encodes to exactly its bytes, within the field widths.
void check_conn(const uint8_t* p) {
    ConnBody w;
    std::memcpy(&w, p, sizeof w);
    const std::optional<ConnParams> c = decode(w);
    if (!c) return;
    ConnBody again;
    encode(*c, again);
    check(std::memcmp(&again, &w, sizeof w) == 0);
    check(c->qpn <= kMaxQpn && c->psn <= kMaxPsn && c->conn_id != 0 && (c->caps & ~kCapAll) == 0);
}

void check_body(MsgType type, std::span<const uint8_t> body) {
    if (const std::size_t fixed = fixed_body_size(type); fixed != 0) {
        check(body.size() == fixed);
        switch (type) {
        case MsgType::reg: check_record(body.data() + offsetof(RegisterBody, record)); break;
        case MsgType::resolve_reply: check_record(body.data() + offsetof(ResolveReplyBody, record)); break;
        case MsgType::answer: check_record(body.data() + offsetof(AnswerBody, record)); break;
        case MsgType::conn_req:
        case MsgType::conn_rep:
        case MsgType::conn_rtu:
        case MsgType::hs_req:
        case MsgType::hs_rep:
        case MsgType::hs_rtu: check_conn(body.data()); break;
        default: break;
        }
        return;
    }
    // Stream bodies: walk `count` entries; each must lie inside the body, and they fill it exactly.
    check(type == MsgType::announce || type == MsgType::withdraw);
    check(body.size() >= sizeof(StreamBody));
    StreamBody sb;
    std::memcpy(&sb, body.data(), sizeof sb);
    const std::size_t count = load_be16(sb.count);
    const std::size_t entry = type == MsgType::announce ? sizeof(DmaAddressWire) : sizeof(ProcessRefBody);
    check(sizeof(StreamBody) + count * entry == body.size());
    check(count <= (type == MsgType::announce ? kMaxAnnouncePerMsg : kMaxWithdrawPerMsg));
    for (std::size_t i = 0; i < count; ++i) {
        const std::span<const uint8_t> e = body.subspan(sizeof(StreamBody) + i * entry, entry);
        check(inside(e, body));
        if (type == MsgType::announce) {
            check_record(e.data());
        } else {
            ProcessRefBody r;
            std::memcpy(&r, e.data(), sizeof r);
            (void)load_be64(r.pid), (void)load_be32(r.epoch);
        }
    }
}

bool openssl_verify(std::span<const uint8_t> data, std::span<const uint8_t> mac) {
    uint8_t out[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    check(HMAC(EVP_sha256(), kFuzzKey.data(), static_cast<int>(kFuzzKey.size()), data.data(), data.size(), out,
               &len) != nullptr);
    return mac.size() == len && std::memcmp(out, mac.data(), len) == 0;
}

// One sender channel as the gateway keeps it, beside a reference of every seq it accepted.
struct Channel {
    ReplayWindow window;
    std::set<uint64_t> accepted;
};

ReplayVerdict reference_verdict(const Channel& c, uint64_t seq, uint64_t now) {
    if (seq > now + kMaxSkew) return ReplayVerdict::future;
    if (seq < now - kMaxSkew) return ReplayVerdict::stale;
    if (c.accepted.empty()) return ReplayVerdict::ok;
    const uint64_t top = *c.accepted.rbegin();
    if (seq > top) return ReplayVerdict::ok;
    if (top - seq >= ReplayWindow::kWindow) return ReplayVerdict::too_old;
    return c.accepted.count(seq) != 0 ? ReplayVerdict::replayed : ReplayVerdict::ok;
}

struct Receiver {
    uint64_t now = kFuzzNow;
    std::map<std::pair<uint16_t, uint8_t>, Channel> channels;  // (sender party, channel)
};

void feed(Receiver& rx, const uint8_t* data, std::size_t len, uint8_t control) {
    rx.now += static_cast<uint64_t>(control >> 1) << kClockStepShift;
    // An exact-size copy, so ASan flags any access past the end.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);
    if (len != 0) std::memcpy(buf.get(), data, len);
    const std::span<uint8_t> d(buf.get(), len);
    if (control & kSealBit) fuzz_key().seal(d);

    ParsedMsg m;
    const WireError e = parse_message(d, m);
    if (e != WireError::ok) {
        check(wire_error_name(e)[0] != '?');
        return;
    }
    const Header& h = m.header;
    const bool peer = is_peer_message(h.type);
    check(msg_type_name(h.type)[0] != '?');

    // The spans: header | body | mac, back to back, filling the datagram.
    const std::span<const uint8_t> whole(d);
    check(inside(m.body, whole) && inside(m.mac, whole) && inside(m.authenticated, whole));
    check(m.authenticated.data() == d.data() && m.authenticated.size() == sizeof(MsgHeader) + h.body_len);
    check(m.body.data() == d.data() + sizeof(MsgHeader) && m.body.size() == h.body_len);
    check(m.mac.data() == d.data() + sizeof(MsgHeader) + h.body_len && m.mac.size() == (peer ? kMacLen : 0));
    check(sizeof(MsgHeader) + h.body_len + m.mac.size() == len);
    check(h.body_len <= kMaxBody);

    // The header re-encodes to its own bytes, and a datagram made with it parses to the same header.
    MsgHeader w;
    encode(h, w);
    check(std::memcmp(&w, d.data(), sizeof w) == 0);
    std::vector<uint8_t> again(reinterpret_cast<const uint8_t*>(&w), reinterpret_cast<const uint8_t*>(&w) + sizeof w);
    again.insert(again.end(), m.body.begin(), m.body.end());
    again.insert(again.end(), m.mac.begin(), m.mac.end());
    ParsedMsg m2;
    check(parse_message(again, m2) == WireError::ok);
    check(m2.header.type == h.type && m2.header.sender_party == h.sender_party && m2.header.body_len == h.body_len &&
          m2.header.seq == h.seq && m2.header.channel == h.channel);

    check_body(h.type, m.body);

    const bool verified = fuzz_key().verify(m.authenticated, m.mac);
    check(verified == openssl_verify(m.authenticated, m.mac));
    if (!peer) {
        check(!verified);  // no trailer, nothing to verify
        return;
    }
    if (control & kSealBit) check(verified);
    if (!verified || h.channel > 1) return;  // the gateway drops these before the window

    Channel& c = rx.channels[{h.sender_party, h.channel}];
    const ReplayVerdict v = c.window.check(h.seq, rx.now, kMaxSkew);
    check(replay_verdict_name(v)[0] != '?');
    check(v == reference_verdict(c, h.seq, rx.now));
    if (v != ReplayVerdict::ok) return;
    check(c.accepted.insert(h.seq).second);  // never accepted before
    c.window.accept(h.seq);
    check(c.window.highest() == *c.accepted.rbegin());
    check(c.window.check(h.seq, rx.now, kMaxSkew) == ReplayVerdict::replayed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 64 * 1024) return 0;
    Receiver rx;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::size_t start = 0;
    for (bool first = true;; first = false) {
        const std::size_t end = std::min(in.find(std::string_view(kMarker, kMarkerLen), start), size);
        if (first) {
            feed(rx, data, end, 0);
        } else if (end > start) {
            feed(rx, data + start + 1, end - start - 1, data[start]);
        }
        if (end == size) break;
        start = end + kMarkerLen;
    }
    return 0;
}
