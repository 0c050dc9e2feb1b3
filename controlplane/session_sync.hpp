// Session events between the members of a party's group ([cluster] sync). The active member's
// workers log every port-map session they open and close (Nat::log_events); a control thread here
// sends them, as UDP datagrams on the management network, to each other member that publishes a
// sync address in the store. A standby keeps what it hears as a mirror of the active's session
// table. Today the mirror is shown (`fedgatectl cluster status`), not installed at a takeover:
// sessions are still lost on failover, and installing the mirror is the next step, as VPP's NAT HA
// does with the same kind of channel. A member that misses events (a gap in the sender's sequence,
// or it started after the sender) asks for a resync and receives the sender's whole table.
//
// The same channel keeps a standby's resolution cache warm: once a second a standby asks the active
// member for its remote records (what peers announced and what queries learned), naming the
// version of the copy it holds; the active sends its records again only when they changed since,
// and the standby puts them into its own cache, so that lookups after a takeover are answered at
// once rather than after each peer's new announce snapshot.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "controlplane/resolution.hpp"  // CacheRecord
#include "dataplane/nat.hpp"
#include "dataplane/peer_auth.hpp"

namespace fedgate {

// Another member of the group as the sync channel sees it (from the store's member keys).
struct SyncPeer {
    std::string member;
    uint32_t addr = 0;  // host order
    uint16_t port = 0;
    bool active = false;  // holds the group's leader key
};

// One datagram of the channel. On the wire (multi-byte fields big-endian):
//   "FGSE" | version 1 | kind | flags | name length | member name | boot (8) | seq (8) | count (2)
//   | part (4) | count events of 32 bytes: type proto kind out_port | in src dst sport dport | out
//   src dst sport dport | timeout_ms
// `boot` names the sender's run; `seq` is the sender's number for the first event (events; an
// empty events datagram, sent each second when there is nothing else, says where the sequence is)
// or how many events it had sent when it took the table (snapshot: parts numbered from 0, flags
// first/last mark the ends; a part out of order makes the receiver ask again).
// Cache records (kinds cache_request and cache) use the same header: `seq` is the version of the
// records the asker holds (0: none) or the sender's (cache: parts numbered as a snapshot's), and
// `count` records of 64 bytes follow in place of events: key (8) | owner party (2) | kind (1) | 0 |
// ttl_ms (4, 0: no expiry) | the record as the resolution protocol carries it (48).
struct SyncDatagram {
    enum class Kind : uint8_t { events = 1, resync_request = 2, snapshot = 3, cache_request = 4, cache = 5 };
    static constexpr uint8_t kFirst = 1, kLast = 2;
    static constexpr uint8_t kVersion = 1;
    static constexpr std::size_t kMaxEvents = 40;   // a datagram stays under 1,400 bytes
    static constexpr std::size_t kMaxRecords = 20;  // the same for cache records
    Kind kind = Kind::events;
    uint8_t flags = 0;
    std::string member;
    uint64_t boot = 0;
    uint64_t seq = 0;
    uint32_t part = 0;
    std::vector<SessionEvent> events;
    std::vector<CacheRecord> records;  // kind cache only

    std::vector<uint8_t> encode() const;
    // Nullopt for anything malformed, with the reason in *why.
    static std::optional<SyncDatagram> decode(std::span<const uint8_t> bytes, std::string* why);
};

struct MirrorCounters {
    uint64_t events_received = 0, datagrams_received = 0, events_missed = 0, duplicates = 0, full = 0,
             snapshot_parts_missed = 0;
};

// Other members' session tables as their events tell them. Pure (no sockets, no clock).
class SessionMirror {
public:
    explicit SessionMirror(std::size_t max_sessions) : max_(max_sessions) {}
    // Applies an events or snapshot datagram from d.member. True when the sender should be asked
    // for a resync: events were missed, or this is the first word from its run and not its first
    // event.
    bool apply(const SyncDatagram& d);
    bool knows(const std::string& member) const { return from_.count(member) != 0; }
    // The member's last snapshot arrived whole (every part in order through the last).
    bool synced(const std::string& member) const {
        const auto it = from_.find(member);
        return it != from_.end() && it->second.synced;
    }
    std::size_t sessions(const std::string& member) const;
    std::size_t total() const;
    const MirrorCounters& counters() const { return counters_; }
    nlohmann::ordered_json from_json() const;  // [{"member", "boot", "sessions"}]

private:
    struct Key {
        uint32_t src, dst;
        uint16_t sport, dport;
        uint8_t proto;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        std::size_t operator()(const Key& k) const {
            return std::hash<uint64_t>()((uint64_t{k.src} << 32 | k.dst) ^
                                         (uint64_t{k.sport} << 40 | uint64_t{k.dport} << 24 | k.proto) * 0x9e3779b97f4a7c15ull);
        }
    };
    struct From {
        uint64_t boot = 0;
        uint64_t next_seq = 0;
        uint32_t next_part = 0;      // of the snapshot under way
        bool in_snapshot = false;    // its first part came, its last not yet
        bool synced = false;         // the last snapshot came whole
        std::unordered_map<Key, SessionEvent, KeyHash> sessions;
    };
    void put(From& f, const SessionEvent& e);

    std::size_t max_;
    std::map<std::string, From> from_;
    MirrorCounters counters_;
};

struct SyncCounters {
    uint64_t events_sent = 0, datagrams_sent = 0, send_errors = 0, resyncs_sent = 0, resyncs_requested = 0,
             rejected = 0, failures = 0;
    // The warm cache: copies asked for and sent, copies taken whole into the cache (and parts that
    // went missing, which make the standby ask again), and the records the last copy held.
    uint64_t cache_requests_sent = 0, caches_sent = 0, caches_received = 0, cache_parts_missed = 0,
             cache_records = 0;
    MirrorCounters mirror;
    uint64_t mirrored = 0;  // sessions in the mirror now
};

class SessionSync {
public:
    struct Io {
        // Up to `max` events the workers logged (the session-event ring); returns how many.
        std::function<std::size_t(SessionEvent* out, std::size_t max)> take;
        // Every session the workers hold now, as opened events, a page at a time to `page` (for a
        // resync); stops early when `page` returns false. Throws when a worker does not answer.
        using Page = std::function<bool(std::span<const SessionEvent>)>;
        std::function<void(const Page& page)> dump;
        // Events the workers could not log or hand over (nat.session_events_lost), ever.
        std::function<uint64_t()> lost;
        // The group's other members that publish a sync address.
        std::function<std::vector<SyncPeer>()> peers;
        // This member's remote cache records and their version, or nullopt while the version is
        // still the one given (ResolutionService::remote_cache); null: this member sends none.
        std::function<std::optional<std::pair<uint64_t, std::vector<CacheRecord>>>(uint64_t held_version)> cache_dump;
        // The active member's records, whole, at their version: into this member's cache (null:
        // this member does not ask for them).
        std::function<void(std::vector<CacheRecord> records, uint64_t version)> cache_install;
    };
    // Binds a UDP socket on `listen` (host order); throws std::runtime_error naming the address.
    // Every datagram goes out with an HMAC-SHA256 under `key` ([cluster] sync_key) after its
    // bytes, and one whose MAC does not verify is dropped and counted.
    SessionSync(std::string member, std::pair<uint32_t, uint16_t> listen, std::size_t max_mirrored, Io io,
                std::span<const uint8_t> key);
    ~SessionSync();
    SessionSync(const SessionSync&) = delete;
    SessionSync& operator=(const SessionSync&) = delete;

    void start();
    void stop();
    SyncCounters counters() const;
    nlohmann::ordered_json status() const;  // cluster status's "sessions"

private:
    void loop();
    void send_events();
    void receive();
    void ask_for_resyncs(uint64_t now_ms);
    void ask_for_cache(uint64_t now_ms);
    void send_cache(const SyncPeer& p, uint64_t held_version);
    void take_cache_part(const SyncPeer& p, const SyncDatagram& d);
    SyncDatagram ours(SyncDatagram::Kind kind) const {  // a datagram of this member's run
        SyncDatagram d;
        d.kind = kind;
        d.member = member_;
        d.boot = boot_;
        return d;
    }
    bool send_to(const SyncPeer& p, const SyncDatagram& d);  // false when it could not be sent
    void send_snapshot(const SyncPeer& p);
    std::optional<SyncPeer> peer_at(uint32_t addr, uint16_t port) const;

    const std::string member_;
    const std::pair<uint32_t, uint16_t> listen_;
    const HmacKey key_;
    Io io_;
    int fd_ = -1;
    uint64_t boot_;
    uint64_t seq_ = 0;  // events sent so far, and those lost before they reached us
    uint64_t lost_seen_ = 0;
    uint64_t last_send_ms_ = 0;  // anything sent to the peers (an empty events datagram each second else)
    std::vector<SyncPeer> peers_;  // as io_.peers() said last (loop thread)
    std::map<std::string, uint64_t> last_resync_ask_ms_, last_resync_sent_ms_;
    std::set<std::string> want_;  // members whose table we need whole (asked once a second until it comes)
    // The warm cache (loop thread): the version of the copy taken from each member, when each was
    // last asked or answered, and the copy under way (from one member at a time). A copy whose
    // version is not above the one held is one sent again (or replayed): it is not taken.
    std::map<std::string, uint64_t> cache_version_, last_cache_ask_ms_, last_cache_sent_ms_;
    struct CacheIn {
        std::string member;
        uint64_t version = 0;
        uint32_t next_part = 0;
        std::vector<CacheRecord> records;
        bool open = false;
    } cache_in_;
    std::thread thread_;
    std::atomic<bool> stop_{false};

    mutable std::mutex mu_;  // mirror_ and counters_, for status()
    SessionMirror mirror_;
    SyncCounters counters_;
};

}  // namespace fedgate
