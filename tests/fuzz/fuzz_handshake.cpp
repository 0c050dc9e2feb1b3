// libFuzzer target: the connection handshake as a gateway relays it. Handshake bodies (ConnBody)
// from compute processes and peer gateways go through the real decoder and then HandshakeRelay
// (controlplane/handshake_relay.hpp), whose I/O is a fake gateway: registered processes, two peers,
// automatic mappings and a small pool of RoCE virtual QPNs per side.
//
// Checked: a body that decodes re-encodes to the same bytes; everything the relay sends decodes on
// the far side (encode -> decode gives it back); messages to processes go to our private network,
// to peers only to parties we peer with and with the right message types; what leaves for a peer
// names our external address, never a private one (tcp endpoint, RoCE GID); a virtual QPN is
// released only if reserved and not installed, installed only if reserved; and when time runs
// past every handshake's timeout the table empties and every vQPN not installed is back.
//
// Input: operations, each an opcode byte (low 3 bits: what, high 5: an argument) and the bytes it
// reads: 0-5 a conn_req/rep/rtu from a process or hs_req/rep/rtu from a peer (76 body bytes);
// 6 time passes (expire); 7 an answer to the last message the relay sent (76 body bytes whose IDs
// are replaced by that message's, so handshakes get past the first step).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <span>

#include "controlplane/handshake_relay.hpp"
#include "proto/conn_wire.hpp"

namespace {

using namespace fedgate;

constexpr uint16_t kParty = 1;
constexpr uint32_t kPrivateNet = 0xc6120100;  // 198.18.1.0/24: our processes
constexpr uint32_t kInternalAddr = 0xc6120101;  // 198.18.1.1
constexpr uint32_t kExternalAddr = 0xc6130001;  // 198.19.0.1
constexpr uint32_t kPeer2Addr = 0xc6130002;     // party 2's gateway; party 3's address is not known
constexpr uint32_t kTimeoutMs = 1000;
constexpr uint32_t kMaxHandshakes = 8;
constexpr uint32_t kVqpnsPerSide = 4;

// A broken invariant names its line before the abort that libFuzzer reports.
void check(bool ok, unsigned line = __builtin_LINE()) {
    if (ok) return;
    std::fprintf(stderr, "%s:%u: invariant broken\n", __FILE__, line);
    std::abort();
}

struct Input {
    const uint8_t* p;
    std::size_t n;
    bool empty() const { return n == 0; }
    uint8_t u8() {
        if (n == 0) return 0;
        --n;
        return *p++;
    }
    ConnBody body() {
        ConnBody b{};
        const std::size_t len = std::min(sizeof b, n);
        std::memcpy(&b, p, len);
        p += len, n -= len;
        return b;
    }
};

// What reaches the far side of a message the relay sends: it must decode to what was sent.
void check_on_the_wire(const ConnParams& p) {
    ConnBody w;
    encode(p, w);
    const std::optional<ConnParams> again = decode(w);
    check(again.has_value() && *again == p);
}

struct Sent {
    bool to_peer = false;
    Endpoint4 dst;
    uint16_t party = 0;
    MsgType type = MsgType::conn_req;
    ConnParams p;
};

class FakeGateway : public RelayIo {
public:
    std::optional<Sent> last_to_process, last_to_peer;
    std::set<uint32_t> reserved[2], installed[2], ever[2];  // by RoceSide

    std::optional<Endpoint4> control_endpoint(ProcessId pid) override {
        const uint32_t local = pid.local();
        if (pid.party() != kParty || local == 0 || local >= 32 || local % 8 == 7) return std::nullopt;
        return Endpoint4{kPrivateNet | local, static_cast<uint16_t>(40000 + local)};
    }
    bool has_peer(uint16_t party) override { return party == 2 || party == 3; }
    void to_process(Endpoint4 dst, MsgType type, const ConnParams& p) override {
        check(type == MsgType::conn_req || type == MsgType::conn_rep || type == MsgType::conn_rtu);
        check((dst.addr & 0xffffff00) == kPrivateNet);
        check_on_the_wire(p);
        last_to_process = Sent{false, dst, 0, type, p};
    }
    void to_peer(uint16_t party, MsgType type, const ConnParams& p) override {
        check(type == MsgType::hs_req || type == MsgType::hs_rep || type == MsgType::hs_rtu);
        check(has_peer(party));
        check_on_the_wire(p);
        // What crosses to the other party names this gateway's external side, not a private address.
        const bool offers_rdma = type == MsgType::hs_req ? (p.caps & kCapRdma) != 0
                                                         : type == MsgType::hs_rep && p.status == ConnStatus::ok &&
                                                               p.caps == kCapRdma;
        if (offers_rdma) {
            check(gid_ipv4(p.gid) == kExternalAddr);
            const int ext = side(RoceSide::external);
            const bool held = installed[ext].count(p.qpn) + reserved[ext].count(p.qpn) == 1;
            // A REQ retried after its handshake timed out starts over with fresh vQPNs (it once went
            // out again with the one released at the timeout).
            check(held);
        }
        if (type == MsgType::hs_rep && p.status == ConnStatus::ok && p.caps == kCapTcp) check(p.ipv4 == kExternalAddr);
        last_to_peer = Sent{true, {}, party, type, p};
    }
    std::optional<Endpoint4> exported_endpoint(ProcessId target) override {
        if (target.local() % 2 != 0) return std::nullopt;
        return Endpoint4{kExternalAddr, static_cast<uint16_t>(20000 + target.local() % 1000)};
    }
    std::optional<Endpoint4> imported_endpoint(uint16_t party, uint16_t peer_port, ProcessId target,
                                               ProcessId initiator) override {
        check(has_peer(party) && target.party() == party && initiator.party() == kParty);
        if (peer_port == 0) return std::nullopt;
        return Endpoint4{kInternalAddr, static_cast<uint16_t>(30000 + peer_port % 1000)};
    }
    std::optional<uint32_t> roce_reserve(RoceSide s) override {
        const uint32_t base = s == RoceSide::internal ? 0x100 : 0x200;
        for (uint32_t v = base; v < base + kVqpnsPerSide; ++v) {
            if (reserved[side(s)].count(v) == 0 && installed[side(s)].count(v) == 0) {
                reserved[side(s)].insert(v);
                ever[side(s)].insert(v);
                return v;
            }
        }
        return std::nullopt;
    }
    void roce_release(RoceSide s, uint32_t vqpn) override { check(reserved[side(s)].erase(vqpn) == 1); }
    bool roce_install(const RoceConn& c) override {
        check(reserved[side(RoceSide::internal)].count(c.internal_vqpn) == 1);
        check(reserved[side(RoceSide::external)].count(c.external_vqpn) == 1);
        check(c.local.party() == kParty && c.remote.party() == c.peer_party && has_peer(c.peer_party));
        reserved[side(RoceSide::internal)].erase(c.internal_vqpn);
        reserved[side(RoceSide::external)].erase(c.external_vqpn);
        // As RoceTranslations::install: no route to the node or the peer, and both go back.
        if (c.peer_addr == 0 || (c.node_addr & 0xffffff00) != kPrivateNet) return false;
        installed[side(RoceSide::internal)].insert(c.internal_vqpn);
        installed[side(RoceSide::external)].insert(c.external_vqpn);
        return true;
    }
    uint32_t own_address(RoceSide s) override { return s == RoceSide::internal ? kInternalAddr : kExternalAddr; }
    uint32_t peer_address(uint16_t party) override { return party == 2 ? kPeer2Addr : 0; }
    uint16_t rdma_mtu_limit() override { return 1024; }

    static int side(RoceSide s) { return s == RoceSide::internal ? 0 : 1; }
};

constexpr MsgType kTypes[6] = {MsgType::conn_req, MsgType::conn_rep, MsgType::conn_rtu,
                               MsgType::hs_req,   MsgType::hs_rep,   MsgType::hs_rtu};

struct Relayed {
    FakeGateway io;
    HandshakeRelay relay;
    uint64_t now = 1'000'000;

    explicit Relayed(const ConnectSettings& s) : relay(kParty, s, io) {}

    // A decoded body goes where ResolutionService sends it; a body that does not decode is dropped
    // there (malformed_handshakes).
    void deliver(MsgType type, uint8_t arg, const ConnBody& w) {
        const std::optional<ConnParams> p = decode(w);
        if (!p) return;
        ConnBody again;
        encode(*p, again);
        check(std::memcmp(&again, &w, sizeof w) == 0);
        check(p->conn_id != 0 && p->qpn <= kMaxQpn && p->psn <= kMaxPsn && (p->caps & ~kCapAll) == 0);
        if (type == MsgType::conn_req || type == MsgType::conn_rep || type == MsgType::conn_rtu) {
            const uint32_t local = arg & 0x1f;
            relay.on_client(type, Endpoint4{kPrivateNet | local, static_cast<uint16_t>(40000 + local)}, *p, now);
        } else {
            // Only a configured peer's messages get this far (ResolutionService::on_message).
            relay.on_peer(type, static_cast<uint16_t>(2 + (arg & 1)), *p, now);
        }
        check(relay.size() <= kMaxHandshakes);
    }

    // The next step of the last message sent, from whoever it went to: a REQ is answered with a
    // REP, a REP with an RTU. arg bit 0: to a process or to a peer; bit 1: a well-formed ok answer.
    void answer(uint8_t arg, ConnBody w) {
        const std::optional<Sent>& last = (arg & 1) != 0 ? io.last_to_peer : io.last_to_process;
        if (!last) return;
        const ConnParams& q = last->p;
        MsgType type;
        switch (last->type) {
        case MsgType::conn_req: type = MsgType::conn_rep; break;
        case MsgType::conn_rep: type = MsgType::conn_rtu; break;
        case MsgType::hs_req: type = MsgType::hs_rep; break;
        case MsgType::hs_rep: type = MsgType::hs_rtu; break;
        default: return;
        }
        store_be64(w.conn_id, q.conn_id);
        store_be64(w.initiator, q.initiator.value);
        store_be64(w.target, q.target.value);
        if ((arg & 2) != 0) {
            w.status = 0;
            std::memset(w.reserved, 0, sizeof w.reserved);
            w.caps = type == MsgType::conn_rtu || type == MsgType::hs_rtu ? q.caps
                     : (q.caps & kCapRdma) != 0 && (arg & 4) != 0           ? kCapRdma
                                                                            : kCapTcp;
            w.qpn[0] = 0;  // 24 bits
            w.psn[0] = 0;
            if (w.caps == kCapRdma) {
                // A process names its own RoCE address; a peer gateway its external one.
                const uint32_t addr = last->to_peer ? (arg & 8) != 0 ? kPeer2Addr : kExternalAddr
                                                    : kPrivateNet | (last->dst.addr & 0x1f);
                const auto gid = ipv4_gid(addr);
                std::memcpy(w.gid, gid.data(), gid.size());
                if (load_be32(w.qpn) == 0) w.qpn[3] = 1;
            }
        }
        const uint8_t who = last->to_peer ? static_cast<uint8_t>(last->party - 2) : static_cast<uint8_t>(last->dst.addr & 0x1f);
        deliver(type, who, w);
    }

    // Time runs past every timeout: nothing is left, and no virtual QPN leaked.
    void finish() {
        now += kTimeoutMs;
        relay.expire(now);
        now += kTimeoutMs;
        relay.expire(now);
        check(relay.size() == 0);
        check(io.reserved[0].empty() && io.reserved[1].empty());
        (void)relay.list(16, now);
        (void)relay.stats();
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 8192) return 0;
    ConnectSettings s;
    s.handshake_timeout_ms = kTimeoutMs;
    s.max_handshakes = kMaxHandshakes;
    Relayed r(s);
    Input in{data, size};
    while (!in.empty()) {
        const uint8_t op = in.u8();
        const uint8_t what = op & 7, arg = op >> 3;
        if (what < 6) {
            r.deliver(kTypes[what], arg, in.body());
        } else if (what == 6) {
            r.now += arg * 64u;
            r.relay.expire(r.now);
        } else {
            r.answer(arg, in.body());
        }
    }
    r.finish();
    return 0;
}
