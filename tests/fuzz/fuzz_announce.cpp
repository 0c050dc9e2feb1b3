// libFuzzer target: the announce stream (controlplane/announce_stream.hpp) end to end, as two
// gateways run it: our AnnounceSender's messages go over a channel the input makes lossy (drops,
// duplicates, reordering), arrive as datagrams that parse_message and the stream-body decoder read
// as ResolutionService does, and feed an AnnounceReceiver whose verdicts are applied to a peer's view
// of our records; its ACKs (and the replies to our keepalive SYNCs) come back the same way. The
// input may also inject hostile stream messages, ACKs and SYNCs, restart either side, and change the
// directory (announce, re-register with a new epoch, withdraw).
//
// Checked: every datagram parses, every body's entries lie exactly inside it and decode back to the
// bytes they came from; the receiver only moves forward within a stream and never applies a message
// out of order or twice; the sender never holds more than it packed; and at the end, after the
// channel turns lossless and time runs on, the sender has nothing left unacknowledged and (unless a
// hostile message was applied or acknowledged something) the peer's view equals our directory.
//
// Input: a sequence of operations, each an opcode byte followed by the bytes it reads (see Op).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "controlplane/announce_stream.hpp"
#include "proto/resolve_wire.hpp"

namespace {

using namespace fedgate;
using Bytes = std::vector<uint8_t>;

constexpr uint16_t kOurParty = 2;
constexpr uint32_t kWindow = 4;
constexpr uint32_t kRtoMs = 50, kMaxRtoMs = 400;
constexpr std::size_t kMaxProcesses = 24;  // local IDs the input picks from
constexpr int kSettleRounds = 2000;

// A broken invariant names its line before the abort that libFuzzer reports.
void check(bool ok, unsigned line = __builtin_LINE()) {
    if (ok) return;
    std::fprintf(stderr, "%s:%u: invariant broken\n", __FILE__, line);
    std::abort();
}

// Reads the input front to back; past the end it yields zeros.
struct Input {
    const uint8_t* p;
    std::size_t n;
    bool empty() const { return n == 0; }
    uint8_t u8() {
        if (n == 0) return 0;
        --n;
        return *p++;
    }
    uint64_t u64() {
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v = v << 8 | u8();
        return v;
    }
    std::span<const uint8_t> take(std::size_t len) {
        len = std::min(len, n);
        const std::span<const uint8_t> s(p, len);
        p += len, n -= len;
        return s;
    }
};

DmaAddress make_record(uint32_t local, uint32_t epoch, uint8_t variant) {
    DmaAddress a;
    a.pid = ProcessId::make(kOurParty, 1, local);
    a.epoch = epoch;
    a.transport = (variant & 1) != 0 ? Transport::roce_v2 : Transport::tcp;
    a.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, variant, static_cast<uint8_t>(local)};
    a.qpn = (variant & 1) != 0 ? 0x100u * variant + local : 0;
    a.mtu = (variant & 1) != 0 ? 1024 : 0;
    a.ipv4 = 0xc6120a00 | (local & 0xff);  // 198.18.10.x
    a.port = static_cast<uint16_t>(18000 + variant);
    a.ttl_s = 60;
    return a;
}

// A datagram as the wire carries it: header | body | MAC (zeros: the lcore checked the real one).
Bytes datagram(MsgType type, std::span<const uint8_t> body) {
    MsgHeader h;
    encode(Header{type, kOurParty, static_cast<uint16_t>(body.size()), 1, 1}, h);
    Bytes d(sizeof h + body.size() + kMacLen, 0);
    std::memcpy(d.data(), &h, sizeof h);
    if (!body.empty()) std::memcpy(d.data() + sizeof h, body.data(), body.size());
    return d;
}

template <typename T>
T body_as(std::span<const uint8_t> body, std::size_t offset = 0) {
    T v;
    std::memcpy(&v, body.data() + offset, sizeof v);
    return v;
}

template <typename T>
std::span<const uint8_t> bytes_of(const T& t) {
    return {reinterpret_cast<const uint8_t*>(&t), sizeof t};
}

// The peer gateway: its receiver and what it holds from us.
struct Peer {
    AnnounceReceiver in;
    std::map<uint64_t, DmaAddress> view;
};

struct World {
    AnnounceSender out{kWindow, kRtoMs, kMaxRtoMs};
    Peer peer;
    std::map<uint64_t, DmaAddress> dir;  // our directory
    std::map<uint32_t, uint32_t> epochs;  // local ID -> last epoch used
    std::deque<Bytes> forward, back;      // datagrams in flight, to the peer and back to us
    uint64_t now = 1'000'000;
    uint64_t next_stream = 1;
    bool tainted = false;  // a hostile message changed state: the views may differ
    bool hostile = false;  // set while a hostile datagram is handled

    void restart_sender() {
        std::vector<DmaAddress> snapshot;
        for (const auto& [pid, r] : dir) snapshot.push_back(r);
        out.restart(next_stream++, snapshot, now);
        check(out.stream() != 0 && out.acked() == 0 && out.queued() == 0 && out.unacked() >= 1);
    }

    void poll() {
        const uint64_t before = out.last_seq();
        out.poll(now, [&](MsgType type, const std::vector<uint8_t>& body) {
            check(type == MsgType::announce || type == MsgType::withdraw);
            forward.push_back(datagram(type, body));
        });
        check(out.queued() == 0 && out.last_seq() >= before);
    }

    void send_ack(uint64_t stream, uint64_t acked, uint8_t flags) {
        AckBody a{};
        store_be64(a.stream, stream);
        store_be64(a.acked, acked);
        a.flags = flags;
        back.push_back(datagram(MsgType::ack, bytes_of(a)));
    }

    // The peer gets a datagram (ResolutionService::handle_peer and apply_stream, with a map for a cache).
    void peer_receives(const Bytes& d) {
        ParsedMsg m;
        check(parse_message(d, m) == WireError::ok);
        check(m.body.data() == d.data() + sizeof(MsgHeader) && m.body.size() + sizeof(MsgHeader) + kMacLen == d.size());
        if (m.header.type == MsgType::sync) {
            const auto s = body_as<SyncBody>(m.body);
            const uint64_t stream = load_be64(s.stream);
            const AnnounceReceiver::Verdict v = peer.in.on_sync(stream, load_be64(s.last_seq));
            check(v == AnnounceReceiver::Verdict::unknown_stream || v == AnnounceReceiver::Verdict::gap ||
                  v == AnnounceReceiver::Verdict::duplicate);
            if (v == AnnounceReceiver::Verdict::unknown_stream) {
                check(stream != peer.in.stream() || stream == 0);
                return send_ack(stream, 0, kAckReset);
            }
            check(stream == peer.in.stream());
            check((v == AnnounceReceiver::Verdict::gap) == (peer.in.applied() < load_be64(s.last_seq)));
            return send_ack(stream, peer.in.applied(), 0);
        }
        check(m.header.type == MsgType::announce || m.header.type == MsgType::withdraw);
        const bool announce = m.header.type == MsgType::announce;
        const auto sb = body_as<StreamBody>(m.body);
        const std::size_t count = load_be16(sb.count);
        const std::size_t entry = announce ? sizeof(DmaAddressWire) : sizeof(ProcessRefBody);
        check(sizeof(StreamBody) + count * entry == m.body.size());  // parse_message's promise
        const uint64_t stream = load_be64(sb.stream), seq = load_be64(sb.seq);

        const uint64_t stream_before = peer.in.stream(), applied_before = peer.in.applied();
        const AnnounceReceiver::Verdict v = peer.in.on_message(stream, seq, sb.flags);
        switch (v) {
        case AnnounceReceiver::Verdict::apply_snapshot:
            check(seq == 1 && (sb.flags & kStreamSnapshot) != 0 && stream != 0 && stream != stream_before);
            check(peer.in.stream() == stream && peer.in.applied() == 1);
            break;
        case AnnounceReceiver::Verdict::apply:
            check(stream == stream_before && seq == applied_before + 1 && peer.in.applied() == seq);
            break;
        case AnnounceReceiver::Verdict::duplicate:
        case AnnounceReceiver::Verdict::gap:
        case AnnounceReceiver::Verdict::unknown_stream:
            check(peer.in.stream() == stream_before && peer.in.applied() == applied_before);
            check(v != AnnounceReceiver::Verdict::gap || (stream == stream_before && seq > applied_before + 1));
            break;
        }
        if (v == AnnounceReceiver::Verdict::unknown_stream) return send_ack(stream, 0, kAckReset);
        if (v == AnnounceReceiver::Verdict::apply || v == AnnounceReceiver::Verdict::apply_snapshot) {
            if (hostile) tainted = true;
            apply(m, announce, count, v == AnnounceReceiver::Verdict::apply_snapshot);
        }
        send_ack(peer.in.stream(), peer.in.applied(), 0);
    }

    void apply(const ParsedMsg& m, bool announce, std::size_t count, bool snapshot) {
        if (snapshot) peer.view.clear();
        for (std::size_t i = 0; i < count; ++i) {
            if (announce) {
                const std::size_t off = sizeof(StreamBody) + i * sizeof(DmaAddressWire);
                const auto w = body_as<DmaAddressWire>(m.body, off);
                const std::optional<DmaAddress> r = decode(w);
                if (!r) {
                    check(hostile);  // our own sender writes only records that decode
                    continue;
                }
                DmaAddressWire again;
                encode(*r, again);
                check(std::memcmp(&again, &w, sizeof w) == 0);
                peer.view[r->pid.value] = *r;
            } else {
                const auto ref = body_as<ProcessRefBody>(m.body, sizeof(StreamBody) + i * sizeof(ProcessRefBody));
                const auto it = peer.view.find(load_be64(ref.pid));
                if (it != peer.view.end() && it->second.epoch == load_be32(ref.epoch)) peer.view.erase(it);
            }
        }
    }

    // We get an ACK (ResolutionService::handle_peer): the sender may ask for a restart.
    void we_receive(const Bytes& d) {
        ParsedMsg m;
        check(parse_message(d, m) == WireError::ok && m.header.type == MsgType::ack);
        const auto a = body_as<AckBody>(m.body);
        const uint64_t acked_before = out.acked(), stream_before = out.stream();
        const std::size_t unacked_before = out.unacked();
        const bool reset = out.on_ack(load_be64(a.stream), load_be64(a.acked), a.flags, now);
        check(out.stream() == stream_before && out.acked() >= acked_before && out.acked() <= out.last_seq());
        check(out.unacked() == out.last_seq() - out.acked() && out.unacked() <= unacked_before);
        if (hostile && out.acked() != acked_before) tainted = true;
        if (reset) {
            // A reset, or the peer acknowledging less than it had (it lost the stream's state).
            check(load_be64(a.stream) == stream_before &&
                  ((a.flags & kAckReset) != 0 || load_be64(a.acked) < acked_before));
            restart_sender();
        }
    }

    void deliver_all() {
        while (!forward.empty()) {
            const Bytes d = std::move(forward.front());
            forward.pop_front();
            peer_receives(d);
        }
        while (!back.empty()) {
            const Bytes d = std::move(back.front());
            back.pop_front();
            we_receive(d);
        }
    }

    void sync() {
        const SyncBody s = out.sync_body(static_cast<uint32_t>(dir.size()));
        check(load_be64(s.stream) == out.stream() && load_be64(s.last_seq) == out.last_seq());
        forward.push_back(datagram(MsgType::sync, bytes_of(s)));
    }
};

// The operations; the opcode's low nibble picks one, its high nibble is an argument.
enum Op : uint8_t {
    kRegister,       // + local ID byte, variant byte: a process registers (again: a new epoch)
    kWithdraw,       // + local ID byte: a process leaves
    kPoll,           // time moves on by arg * 16 ms, the sender sends what it may
    kDeliver,        // the oldest datagram in flight to the peer arrives
    kDrop,           // ... is lost
    kDuplicate,      // ... arrives twice
    kReorder,        // ... goes to the back of the queue
    kDeliverBack,    // the oldest ACK in flight to us arrives
    kDropBack,       // ... is lost
    kSync,           // our keepalive SYNC goes out
    kRestartSender,  // we restart (a new stream with a snapshot)
    kRestartPeer,    // the peer restarts and forgets everything
    kHostileStream,  // + type byte, 8-byte stream, 8-byte seq, flags, count byte, entries: a forged stream message
    kHostileAck,     // + 8-byte stream (0: ours), 8-byte acked, flags: a forged ACK
    kHostileSync,    // + 8-byte stream (0: ours), 8-byte last seq: a forged SYNC
    kDeliverAll,     // everything in flight arrives, in order
};

void hostile_stream(World& w, Input& in) {
    const bool announce = (in.u8() & 1) == 0;
    StreamBody sb{};
    uint64_t stream = in.u64();
    if (stream < 4) stream = stream == 0 ? 0 : w.out.stream();  // mostly ours, sometimes none
    store_be64(sb.stream, stream);
    store_be64(sb.seq, in.u64() & 0xff);  // near the real sequence numbers
    sb.flags = in.u8();
    const std::size_t count = in.u8() % 4;
    store_be16(sb.count, static_cast<uint16_t>(count));
    Bytes body(reinterpret_cast<const uint8_t*>(&sb), reinterpret_cast<const uint8_t*>(&sb) + sizeof sb);
    const std::size_t entry = announce ? sizeof(DmaAddressWire) : sizeof(ProcessRefBody);
    for (std::size_t i = 0; i < count; ++i) {
        const std::span<const uint8_t> e = in.take(entry);
        body.insert(body.end(), e.begin(), e.end());
        body.resize(sizeof sb + (i + 1) * entry, 0);
    }
    w.hostile = true;
    w.peer_receives(datagram(announce ? MsgType::announce : MsgType::withdraw, body));
    w.hostile = false;
}

void run(World& w, Input& in) {
    while (!in.empty()) {
        const uint8_t op = in.u8();
        const uint8_t arg = op >> 4;
        switch (static_cast<Op>(op & 0x0f)) {
        case kRegister: {
            const uint32_t local = 1 + in.u8() % kMaxProcesses;
            const DmaAddress r = make_record(local, ++w.epochs[local], in.u8());
            w.dir[r.pid.value] = r;
            w.out.announce(r);
            break;
        }
        case kWithdraw: {
            const ProcessId pid = ProcessId::make(kOurParty, 1, 1 + in.u8() % kMaxProcesses);
            if (const auto it = w.dir.find(pid.value); it != w.dir.end()) {
                w.out.withdraw(pid, it->second.epoch);
                w.dir.erase(it);
            }
            break;
        }
        case kPoll:
            w.now += arg * 16u;
            w.poll();
            break;
        case kDeliver:
        case kDrop:
        case kDuplicate:
        case kReorder: {
            if (w.forward.empty()) break;
            Bytes d = std::move(w.forward.front());
            w.forward.pop_front();
            if ((op & 0x0f) == kDuplicate) w.forward.push_front(d);
            if ((op & 0x0f) == kReorder) w.forward.push_back(std::move(d));
            else if ((op & 0x0f) != kDrop) w.peer_receives(d);
            break;
        }
        case kDeliverBack:
        case kDropBack: {
            if (w.back.empty()) break;
            Bytes d = std::move(w.back.front());
            w.back.pop_front();
            if ((op & 0x0f) == kDeliverBack) w.we_receive(d);
            break;
        }
        case kSync: w.sync(); break;
        case kRestartSender: w.restart_sender(); break;
        case kRestartPeer: w.peer = Peer{}; break;  // it forgets our streams too
        case kHostileStream: hostile_stream(w, in); break;
        case kHostileAck: {
            const uint64_t stream = in.u64(), acked = in.u64();
            const uint8_t flags = in.u8();
            w.send_ack(stream == 0 ? w.out.stream() : stream, acked & 0xff, flags);
            const Bytes d = std::move(w.back.back());
            w.back.pop_back();
            w.hostile = true;
            w.we_receive(d);
            w.hostile = false;
            break;
        }
        case kHostileSync: {
            SyncBody s{};
            const uint64_t stream = in.u64();
            store_be64(s.stream, stream == 0 ? w.out.stream() : stream);
            store_be64(s.last_seq, in.u64() & 0xff);
            w.hostile = true;
            w.peer_receives(datagram(MsgType::sync, bytes_of(s)));
            w.hostile = false;
            break;
        }
        case kDeliverAll: w.deliver_all(); break;
        }
    }
}

// The channel turns lossless and time runs on: the stream must settle with the peer's view ours.
// Not after a forged message was applied or acknowledged something: one that ran the peer ahead of
// what we sent leaves our stream waiting for an ACK it will not get (only a key holder can do that).
// A late copy of a snapshot that takes the peer back to a stream it had followed, or makes a
// restarted peer take up the current stream again at seq 1, must not wedge the stream either: the
// sender starts over when the peer keeps refusing the stream, or keeps acknowledging less than it
// had (they once stuck it until the sender restarted for another reason).
void settle(World& w) {
    const auto unchecked = [&] { return w.tainted; };
    for (int round = 0; round < (unchecked() ? 4 : kSettleRounds); ++round) {
        w.now += kMaxRtoMs;
        w.poll();
        w.sync();
        w.deliver_all();
        if (w.out.unacked() == 0 && w.peer.in.stream() == w.out.stream() && w.peer.in.applied() == w.out.last_seq())
            break;
        if (unchecked() && round >= 4) break;
    }
    if (unchecked()) return;
    check(w.out.unacked() == 0 && w.out.queued() == 0);
    check(w.peer.in.stream() == w.out.stream() && w.peer.in.applied() == w.out.last_seq());
    check(w.peer.view == w.dir);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 4096) return 0;
    World w;
    w.restart_sender();
    Input in{data, size};
    run(w, in);
    settle(w);
    return 0;
}
