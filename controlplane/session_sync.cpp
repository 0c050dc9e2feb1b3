// Session events between a group's members (session_sync.hpp): the wire format, the mirror, and the
// thread that sends, receives and resyncs.
#include "controlplane/session_sync.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "controlplane/config.hpp"
#include "controlplane/log.hpp"
#include "proto/resolve_wire.hpp"  // load_be*, store_be*

namespace fedgate {
namespace {

constexpr char kMagic[4] = {'F', 'G', 'S', 'E'};
constexpr std::size_t kEventBytes = 32;
constexpr std::size_t kRecordBytes = 64;
constexpr std::size_t kFixedHead = 22;  // boot, seq, count, part
constexpr uint64_t kKeepaliveMs = 1000;  // an empty events datagram when nothing else went out
constexpr uint64_t kResyncGapMs = 1000;  // a member asks (and is answered) at most this often
constexpr uint64_t kCacheAskMs = 1000;   // a standby asks the active for its remote records this often
constexpr int kPollMs = 20;              // how long the loop waits for a datagram between sends

// Whether `last` (0: never) is at least `gap` ms before `now`; if so, `now` becomes the last time.
bool due(uint64_t& last, uint64_t now, uint64_t gap) {
    if (last != 0 && now - last < gap) return false;
    last = now;
    return true;
}

uint64_t mono_ms() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

template <typename T>
T get_raw(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Wire format.

std::vector<uint8_t> SyncDatagram::encode() const {
    const bool cache_kind = kind == Kind::cache || kind == Kind::cache_request;
    const std::size_t count = cache_kind ? records.size() : events.size();
    std::vector<uint8_t> b(8 + member.size() + kFixedHead + (cache_kind ? count * kRecordBytes : count * kEventBytes));
    uint8_t* p = b.data();
    const auto raw = [&p](const void* v, std::size_t n) {  // fields already in network order
        std::memcpy(p, v, n);
        p += n;
    };
    raw(kMagic, 4);
    *p++ = kVersion;
    *p++ = static_cast<uint8_t>(kind);
    *p++ = flags;
    *p++ = static_cast<uint8_t>(member.size());
    raw(member.data(), member.size());
    store_be64(p, boot), p += 8;
    store_be64(p, seq), p += 8;
    store_be16(p, static_cast<uint16_t>(count)), p += 2;
    store_be32(p, part), p += 4;
    if (cache_kind) {
        for (const CacheRecord& r : records) {
            store_be64(p, r.key.value), p += 8;
            store_be16(p, r.owner_party), p += 2;
            *p++ = static_cast<uint8_t>(r.kind);
            *p++ = 0;
            store_be32(p, r.ttl_ms), p += 4;
            DmaAddressWire w;
            fedgate::encode(r.record, w);
            raw(&w, sizeof w);
        }
        return b;
    }
    for (const SessionEvent& e : events) {
        *p++ = e.type, *p++ = e.proto, *p++ = e.kind, *p++ = e.out_port;
        raw(&e.in_src, 4), raw(&e.in_dst, 4), raw(&e.in_sport, 2), raw(&e.in_dport, 2);
        raw(&e.out_src, 4), raw(&e.out_dst, 4), raw(&e.out_sport, 2), raw(&e.out_dport, 2);
        store_be32(p, e.timeout_ms), p += 4;
    }
    return b;
}

std::optional<SyncDatagram> SyncDatagram::decode(std::span<const uint8_t> in, std::string* why) {
    const auto bad = [&](const std::string& w) -> std::optional<SyncDatagram> {
        if (why != nullptr) *why = w;
        return std::nullopt;
    };
    if (in.size() < 8 || std::memcmp(in.data(), kMagic, 4) != 0) return bad("not a session-event datagram");
    if (in[4] != kVersion) return bad("version " + std::to_string(in[4]) + " (this gateway speaks 1)");
    SyncDatagram d;
    if (in[5] < 1 || in[5] > 5) return bad("kind " + std::to_string(in[5]));
    d.kind = static_cast<Kind>(in[5]);
    d.flags = in[6];
    const std::size_t name_len = in[7];
    if (name_len == 0 || name_len > 32) return bad("member name of " + std::to_string(name_len) + " bytes");
    const std::size_t head = 8 + name_len + kFixedHead;
    if (in.size() < head) return bad("cut short in its header");
    d.member.assign(reinterpret_cast<const char*>(in.data() + 8), name_len);
    if (!valid_name(d.member)) return bad("member name is not 1-32 of A-Z a-z 0-9 _ -");
    const uint8_t* p = in.data() + 8 + name_len;
    d.boot = load_be64(p);
    d.seq = load_be64(p + 8);
    const std::size_t count = load_be16(p + 16);
    d.part = load_be32(p + 18);
    if (d.kind != Kind::snapshot && d.kind != Kind::cache && d.part != 0)
        return bad("part " + std::to_string(d.part) + " of a datagram that is no snapshot");
    const bool cache_kind = d.kind == Kind::cache || d.kind == Kind::cache_request;
    const std::size_t most = cache_kind ? kMaxRecords : kMaxEvents, each = cache_kind ? kRecordBytes : kEventBytes;
    const std::string noun = cache_kind ? " records" : " events";
    if (count > most) return bad(std::to_string(count) + noun + " (at most " + std::to_string(most) + ")");
    if (in.size() != head + count * each) return bad(std::to_string(in.size()) + " bytes for " + std::to_string(count) + noun);
    if (d.kind == Kind::resync_request && count != 0) return bad("a resync request with events");
    if (d.kind == Kind::cache_request && count != 0) return bad("a cache request with records");
    p = in.data() + head;
    if (cache_kind) {
        for (std::size_t i = 0; i < count; ++i, p += kRecordBytes) {
            CacheRecord r;
            r.key = ProcessId{load_be64(p)};
            r.owner_party = load_be16(p + 8);
            if (p[10] != static_cast<uint8_t>(CacheKind::announced) && p[10] != static_cast<uint8_t>(CacheKind::answered))
                return bad("record " + std::to_string(i) + ": kind " + std::to_string(p[10]));
            r.kind = static_cast<CacheKind>(p[10]);
            if (p[11] != 0) return bad("record " + std::to_string(i) + ": a reserved byte is set");
            if (r.owner_party == 0) return bad("record " + std::to_string(i) + ": owner party 0");
            r.ttl_ms = load_be32(p + 12);
            DmaAddressWire w;
            std::memcpy(&w, p + 16, sizeof w);
            const auto rec = fedgate::decode(w);
            if (!rec) return bad("record " + std::to_string(i) + ": not a valid DMA address record");
            r.record = *rec;
            d.records.push_back(r);
        }
        return d;
    }
    for (std::size_t i = 0; i < count; ++i, p += kEventBytes) {
        SessionEvent e;
        e.type = p[0], e.proto = p[1], e.kind = p[2], e.out_port = p[3];
        if (e.type != SessionEvent::opened && e.type != SessionEvent::closed)
            return bad("event " + std::to_string(i) + ": type " + std::to_string(e.type));
        if (e.proto != 6 && e.proto != 17) return bad("event " + std::to_string(i) + ": protocol " + std::to_string(e.proto));
        if (e.kind > 1) return bad("event " + std::to_string(i) + ": kind " + std::to_string(e.kind));
        e.in_src = get_raw<uint32_t>(p + 4), e.in_dst = get_raw<uint32_t>(p + 8);
        e.in_sport = get_raw<uint16_t>(p + 12), e.in_dport = get_raw<uint16_t>(p + 14);
        e.out_src = get_raw<uint32_t>(p + 16), e.out_dst = get_raw<uint32_t>(p + 20);
        e.out_sport = get_raw<uint16_t>(p + 24), e.out_dport = get_raw<uint16_t>(p + 26);
        e.timeout_ms = load_be32(p + 28);
        if (d.kind == Kind::snapshot && e.type != SessionEvent::opened)
            return bad("event " + std::to_string(i) + ": a snapshot holds open sessions only");
        d.events.push_back(e);
    }
    return d;
}

// ---------------------------------------------------------------------------------------------
// The mirror.

void SessionMirror::put(From& f, const SessionEvent& e) {
    const Key k{e.in_src, e.in_dst, e.in_sport, e.in_dport, e.proto};
    if (e.type == SessionEvent::closed) {
        f.sessions.erase(k);
        return;
    }
    const auto it = f.sessions.find(k);
    if (it != f.sessions.end()) {
        it->second = e;
        return;
    }
    if (total() >= max_) {
        ++counters_.full;
        return;
    }
    f.sessions.emplace(k, e);
}

bool SessionMirror::apply(const SyncDatagram& d) {
    if (d.kind != SyncDatagram::Kind::events && d.kind != SyncDatagram::Kind::snapshot) return false;  // no sessions
    ++counters_.datagrams_received;
    counters_.events_received += d.events.size();
    bool resync = false;
    auto [it, fresh] = from_.try_emplace(d.member);
    From& f = it->second;
    if (fresh || f.boot != d.boot) {  // a run we have not heard from: start over
        f.sessions.clear();
        f.boot = d.boot;
        f.next_seq = d.seq;
        resync = d.kind == SyncDatagram::Kind::events && d.seq != 0;
    }
    if (d.kind == SyncDatagram::Kind::snapshot) {
        if (d.flags & SyncDatagram::kFirst) {
            f.sessions.clear();
            f.next_seq = d.seq;  // events the sender sent before it took the table are in it
            f.next_part = 0;
            f.in_snapshot = true;
            f.synced = false;
        }
        if (!f.in_snapshot || d.part != f.next_part) {  // a part lost or out of order: ask again
            f.in_snapshot = false;
            ++counters_.snapshot_parts_missed;
            return true;
        }
        for (const SessionEvent& e : d.events) put(f, e);
        ++f.next_part;
        if (d.flags & SyncDatagram::kLast) {
            f.in_snapshot = false;
            f.synced = true;
        }
        return resync;
    }
    if (d.seq > UINT64_MAX - d.events.size()) return true;  // only a forged datagram: ask for the table
    const uint64_t end = d.seq + d.events.size();
    if (end <= f.next_seq && !d.events.empty()) {
        ++counters_.duplicates;
        return resync;
    }
    if (d.seq > f.next_seq) {
        // Saturating: a forged sequence number must not wrap the counter round.
        const uint64_t gap = d.seq - f.next_seq;
        counters_.events_missed = gap > UINT64_MAX - counters_.events_missed ? UINT64_MAX : counters_.events_missed + gap;
        resync = true;
    }
    for (std::size_t i = f.next_seq > d.seq ? f.next_seq - d.seq : 0; i < d.events.size(); ++i) put(f, d.events[i]);
    f.next_seq = std::max(f.next_seq, end);
    return resync;
}

std::size_t SessionMirror::sessions(const std::string& member) const {
    const auto it = from_.find(member);
    return it == from_.end() ? 0 : it->second.sessions.size();
}

std::size_t SessionMirror::total() const {
    std::size_t n = 0;
    for (const auto& [_, f] : from_) n += f.sessions.size();
    return n;
}

nlohmann::ordered_json SessionMirror::from_json() const {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& [member, f] : from_) a.push_back({{"member", member}, {"boot", f.boot}, {"sessions", f.sessions.size()}});
    return a;
}

// ---------------------------------------------------------------------------------------------
// The channel.

SessionSync::SessionSync(std::string member, std::pair<uint32_t, uint16_t> listen, std::size_t max_mirrored, Io io,
                         std::span<const uint8_t> key)
    : member_(std::move(member)), listen_(listen), key_(key), io_(std::move(io)),
      boot_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count())),
      mirror_(max_mirrored) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("[cluster] sync: socket: ") + std::strerror(errno));
    // Room for a resync's burst both ways (the kernel caps it at its rmem_max/wmem_max).
    const int buf = 4 << 20;
    (void)::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    (void)::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(listen_.first);
    sa.sin_port = htons(listen_.second);
    if (::bind(fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
        const int e = errno;
        ::close(fd_);
        fd_ = -1;
        throw std::runtime_error("[cluster] sync: cannot bind " + format_endpoint(listen_.first, listen_.second) + ": " +
                                 std::strerror(e) + " (it must be one of this host's addresses on the management network)");
    }
}

SessionSync::~SessionSync() {
    stop();
    if (fd_ >= 0) ::close(fd_);
}

void SessionSync::start() {
    stop_ = false;
    thread_ = std::thread([this] { loop(); });
}

void SessionSync::stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
}

void SessionSync::loop() {
    while (!stop_.load(std::memory_order_relaxed)) {
        pollfd p{fd_, POLLIN, 0};
        (void)::poll(&p, 1, kPollMs);
        try {
            peers_ = io_.peers();
            receive();
            send_events();
            ask_for_resyncs(mono_ms());
            ask_for_cache(mono_ms());
        } catch (const std::exception& e) {  // a worker that did not answer a resync's dump, ...: go on
            FG_LOG(WARNING, gateway, "cluster: session events: %s", e.what());
            std::lock_guard lk(mu_);
            ++counters_.failures;
        }
    }
}

std::optional<SyncPeer> SessionSync::peer_at(uint32_t addr, uint16_t port) const {
    for (const SyncPeer& p : peers_)
        if (p.addr == addr && p.port == port) return p;
    return std::nullopt;
}

bool SessionSync::send_to(const SyncPeer& p, const SyncDatagram& d) {
    std::vector<uint8_t> b = d.encode();
    b.resize(b.size() + kMacLen);
    key_.seal(b);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(p.addr);
    sa.sin_port = htons(p.port);
    const auto send = [&] {
        return ::sendto(fd_, b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) ==
               static_cast<ssize_t>(b.size());
    };
    bool ok = send();
    if (!ok && (errno == EAGAIN || errno == EWOULDBLOCK)) {  // the send buffer is full: wait for room once
        pollfd w{fd_, POLLOUT, 0};
        ok = ::poll(&w, 1, 50) == 1 && send();
    }
    last_send_ms_ = mono_ms();
    std::lock_guard lk(mu_);
    if (!ok) ++counters_.send_errors;
    else ++counters_.datagrams_sent;
    return ok;
}

void SessionSync::send_events() {
    // Events the workers lost never reach us: they still take their numbers, so a receiver sees the
    // gap and asks for the whole table.
    if (io_.lost) {
        const uint64_t lost = io_.lost();
        if (lost > lost_seen_) seq_ += lost - lost_seen_;
        lost_seen_ = std::max(lost_seen_, lost);
    }
    SessionEvent buf[SyncDatagram::kMaxEvents];
    for (int round = 0; round < 64; ++round) {  // at most 2,560 events a turn, so receiving goes on
        const std::size_t n = io_.take(buf, SyncDatagram::kMaxEvents);
        if (n == 0) {
            if (round == 0 && mono_ms() - last_send_ms_ >= kKeepaliveMs && !peers_.empty()) {
                // Nothing to say: where the sequence is, so a gap shows.
                SyncDatagram d = ours(SyncDatagram::Kind::events);
                d.seq = seq_;
                for (const SyncPeer& p : peers_) send_to(p, d);
            }
            return;
        }
        SyncDatagram d = ours(SyncDatagram::Kind::events);
        d.seq = seq_;
        d.events.assign(buf, buf + n);
        seq_ += n;
        for (const SyncPeer& p : peers_) send_to(p, d);
        std::lock_guard lk(mu_);
        counters_.events_sent += n;
    }
}

void SessionSync::send_snapshot(const SyncPeer& p) {
    // The table a page at a time, as the workers give it; a full datagram waits until the next
    // event shows it is not the last, so the last part carries the flag.
    SyncDatagram d = ours(SyncDatagram::Kind::snapshot);
    d.seq = seq_;
    d.flags = SyncDatagram::kFirst;
    std::size_t total = 0;
    bool ok = true;
    io_.dump([&](std::span<const SessionEvent> page) {
        for (const SessionEvent& e : page) {
            if (d.events.size() == SyncDatagram::kMaxEvents) {
                ok = send_to(p, d) && ok;
                d.events.clear();
                d.flags = 0;
                ++d.part;
            }
            d.events.push_back(e);
        }
        total += page.size();
        return !stop_.load(std::memory_order_relaxed);
    });
    d.flags |= SyncDatagram::kLast;
    ok = send_to(p, d) && ok;
    FG_LOG(INFO, gateway, "cluster: sent member %s our %zu sessions in %u datagram(s) (resync)%s", p.member.c_str(), total,
           d.part + 1, ok ? "" : ", some not sent");
    std::lock_guard lk(mu_);
    ++counters_.resyncs_sent;
}

void SessionSync::receive() {
    uint8_t buf[2048 + kMacLen];
    for (int i = 0; i < 256; ++i) {
        sockaddr_in from{};
        socklen_t len = sizeof from;
        const ssize_t n = ::recvfrom(fd_, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n < 0) return;  // EAGAIN: nothing more now
        const uint32_t addr = ntohl(from.sin_addr.s_addr);
        const uint16_t port = ntohs(from.sin_port);
        std::string why;
        const std::size_t size = static_cast<std::size_t>(n);
        const bool authentic = size > kMacLen && key_.verify({buf, size - kMacLen}, {buf + size - kMacLen, kMacLen});
        const auto d = authentic ? SyncDatagram::decode({buf, size - kMacLen}, &why) : std::nullopt;
        if (!authentic) why = "its MAC does not verify (not from a member, or another sync_key)";
        const auto peer = peer_at(addr, port);
        if (!d || !peer || peer->member != d->member) {
            if (d && !peer) why = "not from a member's sync address";
            else if (d) why = "names member " + d->member + ", but comes from " + peer->member + "'s address";
            FG_LOG(DEBUG, gateway, "cluster: session-event datagram from %s dropped: %s", format_endpoint(addr, port).c_str(),
                   why.c_str());
            std::lock_guard lk(mu_);
            ++counters_.rejected;
            continue;
        }
        if (d->kind == SyncDatagram::Kind::cache_request) {
            if (io_.cache_dump) send_cache(*peer, d->seq);
            continue;
        }
        if (d->kind == SyncDatagram::Kind::cache) {
            take_cache_part(*peer, *d);
            continue;
        }
        if (d->kind == SyncDatagram::Kind::resync_request) {
            if (due(last_resync_sent_ms_[peer->member], mono_ms(), kResyncGapMs)) send_snapshot(*peer);
            continue;
        }
        bool resync;
        {
            std::lock_guard lk(mu_);
            resync = mirror_.apply(*d);
        }
        if (resync) {
            want_.insert(peer->member);
        } else if (d->kind == SyncDatagram::Kind::snapshot && (d->flags & SyncDatagram::kLast)) {
            std::lock_guard lk(mu_);
            if (mirror_.synced(peer->member)) want_.erase(peer->member);
        }
    }
}

void SessionSync::ask_for_resyncs(uint64_t now_ms) {
    for (const SyncPeer& p : peers_) {
        // A member that has not heard from the active member's run asks for its table: the active
        // may hold sessions from before this member started, and sends events only as they change.
        bool knows;
        {
            std::lock_guard lk(mu_);
            knows = mirror_.knows(p.member);
        }
        if (p.active && !knows) want_.insert(p.member);
        if (want_.count(p.member) == 0) continue;
        if (!due(last_resync_ask_ms_[p.member], now_ms, kResyncGapMs)) continue;
        SyncDatagram d = ours(SyncDatagram::Kind::resync_request);
        send_to(p, d);
        std::lock_guard lk(mu_);
        ++counters_.resyncs_requested;
    }
}

void SessionSync::ask_for_cache(uint64_t now_ms) {
    if (!io_.cache_install) return;
    for (const SyncPeer& p : peers_) {
        if (!p.active) continue;  // the active member's records are the ones that matter
        if (!due(last_cache_ask_ms_[p.member], now_ms, kCacheAskMs)) continue;
        SyncDatagram d = ours(SyncDatagram::Kind::cache_request);
        const auto it = cache_version_.find(p.member);
        d.seq = it == cache_version_.end() ? 0 : it->second;
        send_to(p, d);
        std::lock_guard lk(mu_);
        ++counters_.cache_requests_sent;
    }
}

void SessionSync::send_cache(const SyncPeer& p, uint64_t held_version) {
    const uint64_t now = mono_ms();
    uint64_t& last = last_cache_sent_ms_[p.member];
    if (last != 0 && now - last < kCacheAskMs / 2) return;  // asked again too soon: a forged or repeated ask
    auto dump = io_.cache_dump(held_version);  // nothing copied while it holds what we hold
    if (!dump) return;
    auto& [version, records] = *dump;
    last = now;
    SyncDatagram d = ours(SyncDatagram::Kind::cache);
    d.seq = version;
    d.flags = SyncDatagram::kFirst;
    bool ok = true;
    for (std::size_t i = 0; i < records.size() || i == 0; i += SyncDatagram::kMaxRecords) {
        const std::size_t end = std::min(records.size(), i + SyncDatagram::kMaxRecords);
        d.records.assign(records.begin() + static_cast<std::ptrdiff_t>(std::min(i, records.size())),
                         records.begin() + static_cast<std::ptrdiff_t>(end));
        if (end == records.size()) d.flags |= SyncDatagram::kLast;
        ok = send_to(p, d) && ok;
        d.flags = 0;
        ++d.part;
        if (stop_.load(std::memory_order_relaxed)) return;
    }
    FG_LOG(DEBUG, gateway, "cluster: sent member %s our %zu remote records (version %llu)%s", p.member.c_str(),
           records.size(), static_cast<unsigned long long>(version), ok ? "" : ", some not sent");
    std::lock_guard lk(mu_);
    ++counters_.caches_sent;
}

void SessionSync::take_cache_part(const SyncPeer& p, const SyncDatagram& d) {
    if (!io_.cache_install) return;
    CacheIn& in = cache_in_;
    if (d.flags & SyncDatagram::kFirst) {
        if (const auto held = cache_version_.find(p.member); held != cache_version_.end() && d.seq <= held->second) {
            std::lock_guard lk(mu_);
            ++counters_.rejected;  // an older copy than ours: sent again, or replayed
            return;
        }
        in = CacheIn{p.member, d.seq, 0, {}, true};
    }
    if (!in.open || in.member != p.member || in.version != d.seq || d.part != in.next_part) {
        // A part lost or out of order: drop the copy; the next ask (a second away) gets it again.
        const bool broke = in.open;  // a copy under way lost a part (else: its first part is missing)
        in = CacheIn{};
        std::lock_guard lk(mu_);
        if (broke) ++counters_.cache_parts_missed;
        return;
    }
    in.records.insert(in.records.end(), d.records.begin(), d.records.end());
    ++in.next_part;
    if (!(d.flags & SyncDatagram::kLast)) return;
    const std::size_t n = in.records.size();
    io_.cache_install(std::move(in.records), in.version);
    cache_version_[p.member] = in.version;
    in = CacheIn{};
    std::lock_guard lk(mu_);
    ++counters_.caches_received;
    counters_.cache_records = n;
}

SyncCounters SessionSync::counters() const {
    std::lock_guard lk(mu_);
    SyncCounters c = counters_;
    c.mirror = mirror_.counters();
    c.mirrored = mirror_.total();
    return c;
}

nlohmann::ordered_json SessionSync::status() const {
    const SyncCounters c = counters();
    nlohmann::ordered_json from;
    {
        std::lock_guard lk(mu_);
        from = mirror_.from_json();
    }
    return {{"sync", format_endpoint(listen_.first, listen_.second)},
            {"events_sent", c.events_sent},
            {"datagrams_sent", c.datagrams_sent},
            {"send_errors", c.send_errors},
            {"events_received", c.mirror.events_received},
            {"datagrams_received", c.mirror.datagrams_received},
            {"events_missed", c.mirror.events_missed},
            {"duplicates", c.mirror.duplicates},
            {"rejected", c.rejected},
            {"resyncs_requested", c.resyncs_requested},
            {"resyncs_sent", c.resyncs_sent},
            {"mirror_full", c.mirror.full},
            {"snapshot_parts_missed", c.mirror.snapshot_parts_missed},
            {"failures", c.failures},
            {"cache_requests_sent", c.cache_requests_sent},
            {"caches_sent", c.caches_sent},
            {"caches_received", c.caches_received},
            {"cache_parts_missed", c.cache_parts_missed},
            {"cache_records", c.cache_records},
            {"mirrored", c.mirrored},
            {"mirrored_from", from}};
}

}  // namespace fedgate
