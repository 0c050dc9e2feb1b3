// The data plane of one worker lcore: the run-to-completion loop (rx burst, parse, classify, act, tx)
// over its queue of each of the gateway's ports, with the ARP/ICMP responder, neighbour resolution,
// the hand-off between workers, and the rings to and from the control threads. Never blocks,
// allocates (beyond mbufs), throws or takes a lock once running.
#pragma once

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_udp.h>

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "dataplane/checksum.hpp"
#include "dataplane/counters.hpp"
#include "dataplane/idle.hpp"
#include "dataplane/nat.hpp"
#include "dataplane/neighbour.hpp"
#include "dataplane/packet.hpp"
#include "dataplane/peer_auth.hpp"
#include "dataplane/rate_limiter.hpp"
#include "dataplane/resolver.hpp"
#include "dataplane/roce.hpp"

struct rte_arp_hdr;
struct rte_ipv4_hdr;
struct rte_mbuf;
struct rte_mempool;
struct rte_ring;
struct rte_rcu_qsbr;

namespace fedgate {

enum class PortRole : uint8_t { internal, external };

// Data-plane workers a gateway runs at most (peer-message channels and query IDs carry the index).
inline constexpr uint16_t kMaxWorkers = 16;

// What the data plane needs to know about one port; addresses in network byte order.
struct DpPortConfig {
    uint16_t port_id = 0;  // DPDK ethdev port
    PortRole role = PortRole::internal;
    rte_ether_addr mac{};
    uint32_t addr = 0;
    uint8_t prefix_len = 24;
    uint32_t next_hop = 0;  // 0: none (only the port's own subnet is reachable through it)
    std::vector<std::pair<uint32_t, MacAddr>> static_neighbours;  // configured ARP entries
    bool rss = false;  // the device spreads flows over the workers' RX queues by a hash (RSS)
    bool tx_cksum = false;  // the device fills in IPv4 header and UDP checksums (TX offload)
};

// A peer gateway as the lcore knows it: where its messages come from and the key they carry.
struct DpPeer {
    uint32_t addr = 0;  // network order
    uint16_t party = 0;
    std::vector<uint8_t> key;  // the current key, and its ID (1-255)
    uint8_t key_id = 0;
    std::vector<uint8_t> next_key;  // during a rotation, accepted too; empty: none
    uint8_t next_key_id = 0;
};

// Channels a peer gateway sends on, each with its own sequence: 0 its worker 0, 1 its control
// threads, 1 + w its worker w >= 1.
inline constexpr uint8_t kPeerChannels = 1 + kMaxWorkers;
inline constexpr uint8_t peer_channel_of_worker(uint16_t w) { return static_cast<uint8_t>(w == 0 ? 0 : w + 1); }

// A peer as a worker checks its messages: its keys, ready to use, and a replay window per sender
// channel.
struct DpPeerState {
    DpPeer cfg;
    PeerKeys keys;
    ReplayWindow windows[kPeerChannels];
    // MAC checks this lcore may spend on the peer's messages (after the cheap checks): a flood from
    // its address cannot eat the core. Unlimited when `limited` is false.
    TokenBucket verify_budget;
    bool limited = false;
};

// How many of a peer's messages an lcore checks the MAC of, per second and at once; rate 0: no limit.
struct PeerVerifyLimit {
    uint32_t rate = 0;
    uint32_t burst = 1;
};

// A fresh peer table for `peers`: windows start at `start_seq` (our clock), so messages stamped
// before it are refused. Control threads build it; the lcore adopts it (set_peers).
std::vector<DpPeerState> make_peer_table(const std::vector<DpPeer>& peers, uint64_t start_seq,
                                         PeerVerifyLimit limit = {});
// A peer of `next` that `old` holds at the same address and party keeps its replay windows, its
// keys changed or not (a rotation), so a reload neither refuses its messages in flight nor lets old
// ones be replayed. No allocation.
void carry_over_replay_windows(const std::vector<DpPeerState>& old, std::vector<DpPeerState>& next);

// The resolution service on the lcore. port 0: off (every UDP packet to our addresses is l4_unhandled).
struct DpResolveConfig {
    uint16_t port = 0;  // host order
    uint64_t max_skew_ns = 30'000'000'000ull;
    PeerVerifyLimit peer_verify;  // this lcore's share of [resolve] peer_verify_rate/burst
    ResolverConfig resolver;     // its peer_parties are filled in from `peers`
    std::vector<DpPeer> peers;
    // A client's resolve request that the cache answers is answered in its own mbuf from the burst
    // loop (Dataplane::answer_hit_in_place). false: every request takes the general path, which
    // gives the same frames and counts (the tests compare the two).
    bool hits_in_place = true;
};

struct DataplaneConfig {
    IdleConfig idle;
    NeighbourTimers neighbour;
    uint32_t neighbour_capacity = 4096;
    NatConfig nat;
    DpResolveConfig resolve;
};

// lcore -> control (the `events` ring, fixed-size elements): what the resolution cache should learn
// from a query answer — a record, or (negative) that nobody holds `key`.
struct ResolveEvent {
    ProcessId key;
    DmaAddress record;
    uint16_t owner_party = 0;
    uint8_t negative = 0;
    uint8_t reserved[5] = {};
};
static_assert(sizeof(ResolveEvent) % 4 == 0);

// The doorbell of the control thread that drains the punt and events rings, so it can sleep between
// messages instead of polling. It sets `sleeping`, fences, re-checks both rings and only then waits on
// `fd` (an eventfd, EFD_NONBLOCK); the lcore, after a poll that enqueued to either ring, fences,
// reads `sleeping` and, only when it is set, takes it (exchange) and writes `fd`. The two fences make
// a lost wake-up impossible: either the control thread sees the message or the lcore sees the flag.
// Taking the flag keeps the lcore's write to one per sleep, never one per packet in a busy period.
struct ControlWake {
    int fd = -1;
    alignas(64) std::atomic<bool> sleeping{false};  // its own cache line: the lcore reads it every poll that punts
};

// The other way: a data-plane lcore's doorbell (an eventfd its idle wait watches beside its RX
// queues). Whoever puts work on one of its rings (a control request, an injected packet, another
// worker's hand-off) rings it after the enqueue; only a sleeping lcore gets the write.
struct LcoreWake {
    int fd = -1;
    alignas(64) std::atomic<bool> sleeping{false};

    void ring() {
        // Pairs with the lcore's fence between raising the flag and its last look at its rings.
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (fd >= 0 && sleeping.load(std::memory_order_relaxed) && sleeping.exchange(false)) {
            const uint64_t one = 1;
            (void)!::write(fd, &one, sizeof one);
        }
    }
};

// Rings between the lcore and the control threads. Both carry mbufs.
//  punt:   lcore -> control, packets the control threads must see (echo replies to our pings, ...);
//          multi-producer when several workers share it
//  inject: control -> lcore, IPv4 packets (no Ethernet header) the lcore routes, resolves and sends;
//          worker 0's only (null for the others)
//  requests: control -> lcore, DpRequest pointers: questions only the lcore can answer (its tables);
//          one ring per worker
//  events: lcore -> control, ResolveEvent elements (not mbufs); multi-producer like punt
//  session_events: lcore -> control, SessionEvent elements: each session opened and closed, for
//          the group's standby members ([cluster] sync); null: none logged. Multi-producer.
// Punted resolution messages (registrations; peers' announce, withdraw, ack, sync) have passed the
// lcore's checks: a peer message reaches the control threads only with a good MAC and fresh seq.
struct DpRings {
    rte_ring* punt = nullptr;
    rte_ring* inject = nullptr;
    rte_ring* requests = nullptr;
    rte_ring* events = nullptr;
    ControlWake* wake = nullptr;  // null: nobody sleeps on punt/events (tests that poll them)
    LcoreWake* bell = nullptr;    // this lcore's doorbell; null: its waits end on traffic or time only
    rte_ring* session_events = nullptr;
};

// A question to the lcore. The control thread sizes `sessions` (reserve) before it asks, so the
// lcore fills it without allocating, then sets `done` (release) and never touches it again.
// For `resolve`, the lcore answers once the query finishes (at the latest after the query timeout).
// For `set_peers`, the lcore swaps `peers` and `peer_parties` with its own (carrying replay windows
// over), so the request comes back holding the old table, which the control thread frees.
struct DpRequest {
    enum class Kind : uint8_t { session_dump, resolve, set_peers } kind = Kind::session_dump;
    uint32_t limit = 0;
    // session_dump: the sessions from pool index `from` on, up to `limit`; `next` is where the next
    // page starts (SessionTable::visit: its capacity when the table is done).
    uint32_t from = 0, next = 0;
    std::vector<SessionInfo> sessions;
    uint64_t total = 0;
    uint64_t now_ms = 0;
    ProcessId target;
    ResolveStatus status = ResolveStatus::ok;
    AnswerSource source = AnswerSource::cache;
    DmaAddress record;
    std::vector<DpPeerState> peers;
    std::vector<uint16_t> peer_parties;  // peers[i].cfg.party, for the resolver
    std::atomic<bool> done{false};
};

// What the lcore reads that control threads change: the port maps, and the RCU variable the lcore
// reports its quiescent states on (thread id = its data-plane index), so old rules can be freed.
struct DpShared {
    const PortMapView* maps = nullptr;
    rte_rcu_qsbr* rcu = nullptr;
    unsigned rcu_thread = 0;
    const ResolveCache* cache = nullptr;  // null: the resolution service is off
    const RoceView* roce = nullptr;       // null: RoCE v2 is not carried (port 4791 is l4_unhandled)
    // A gateway group's member ([cluster]): true while it stands by. Then the workers send nothing
    // (the active member owns the addresses) and drop what IPv4 reaches them, still learning
    // neighbours from ARP; when it turns false, worker 0 announces the addresses with gratuitous
    // ARP on every port. Null: a gateway alone, always active.
    const std::atomic<bool>* standby = nullptr;
};

// Where a Dataplane sits among the gateway's workers. Worker `index` polls RX/TX queue `index` of
// every port. A packet that belongs to another worker (a session port from that worker's slice, a
// flow another worker hashes to, the answer to another worker's query) goes there through the
// other's hand-off ring: handoff[w] is worker w's in-ring (multi-producer, worker w its consumer).
struct DpWorker {
    uint16_t index = 0;
    uint16_t count = 1;
    std::vector<rte_ring*> handoff;  // count rings, or empty when count == 1
    std::vector<LcoreWake*> bells{};  // each worker's doorbell, rung after a hand-off; may be empty
};

// Counters of the resolution service on the lcore, beyond the resolver's own.
struct ResolveDpCounters {
    Counter client_msgs, peer_msgs, punted_registrations, punted_peer_msgs, punted_handshakes, replies_sent, queries_sent,
        answers_sent, events_lost;
    Counter hits_in_place;  // of the replies sent: cache hits answered in the request's own mbuf
};

class Dataplane final : private ResolverIo {
public:
    static constexpr uint16_t kBurst = 32;  // a batch off the rings (punts, injected packets, hand-offs)
    // The most a poll takes off a port's queue, handled as one burst (handle_burst): the fixed work
    // of a burst (its counters, the passes' set-up) spread over more packets, and each pass's
    // prefetches further ahead of their use. Against two bursts of 32 from one receive of 64
    // (nat_bench.sh and resolve_bench.sh, paired turns): 64 at once forwarded 2-3% more at 1K
    // flows, the same at 64K; 128 the same as 64 at 1K and 1-3% more at 64K; cache hits 2% more.
    static constexpr uint16_t kRxBurst = 4 * kBurst;
    static constexpr uint16_t kTxQueueLen = kRxBurst;  // a port's TX queue: sent when full, and every poll
    static constexpr uint32_t kTickMs = 50;  // neighbour timers run at this period
    // Housekeeping per poll that handled packets: neighbour slots and sessions looked at, each.
    static constexpr uint32_t kHousekeepingSlice = 64;

    Dataplane(const DataplaneConfig& cfg, const std::vector<DpPortConfig>& ports, rte_mempool* pool, DpRings rings,
              DpShared shared = {}, DpWorker worker = {});
    ~Dataplane();
    Dataplane(const Dataplane&) = delete;
    Dataplane& operator=(const Dataplane&) = delete;

    // One pass over its queue of every port, its hand-off ring and the inject ring. Returns how many
    // packets it handled.
    uint32_t poll_once();
    // The lcore main loop, until `quit` turns true. Idle back-off sleeps between empty polls.
    void run(const std::atomic<bool>& quit);

    // Read from any thread (lock-free).
    std::size_t port_count() const { return nports_; }
    const PortCounters& port_counters(std::size_t i) const { return ports_[i].counters; }
    const LcoreCounters& counters() const { return counters_; }
    const NatCounters& nat_counters() const { return nat_.counters(); }
    uint64_t session_count() const { return sessions_gauge_.load(std::memory_order_relaxed); }
    // Free ports of a NAT pool as of the last timer tick, and the pool's size.
    uint64_t pool_free(Nat::Pool pool, L4Proto proto) const {
        return pool_free_[static_cast<int>(pool)][static_cast<int>(proto)].load(std::memory_order_relaxed);
    }
    uint64_t pool_size(Nat::Pool pool, L4Proto proto) const { return nat_.pool(pool, proto).size(); }
    uint64_t neighbour_entries() const { return neigh_entries_.load(std::memory_order_relaxed); }
    uint64_t neighbour_entries(std::size_t port) const {
        return ports_[port].neigh_entries.load(std::memory_order_relaxed);
    }
    // Null when the resolution service is off.
    const Resolver* resolver() const { return resolver_.get(); }
    const ResolveDpCounters& resolve_counters() const { return resolve_counters_; }
    uint16_t worker_index() const { return worker_.index; }

    // The worker a packet to one of our addresses belongs to, by its headers (`p` parsed from
    // `frame`): the session port's worker (ports p with p % count == w are worker w's), the worker
    // whose query an answer is, or the flow's hash. Pure; any thread (tests check the steering).
    uint16_t owner_of(const uint8_t* frame, uint16_t in, const ParsedPacket& p) const;

    static constexpr uint8_t kDefaultTtl = 64;  // of the datagrams the data plane sends itself
    // Fills in the IPv4 and UDP headers (checksums included) in front of a payload of `len` bytes
    // that is already in place after them. Addresses and ports network order. Any thread.
    // `tail_sum`/`summed_from`: the payload's bytes from `summed_from` on sum to `tail_sum` (16-bit
    // one's-complement, unfolded; summed_from even), so only the bytes before it are read.
    static void write_udp_ipv4(rte_ipv4_hdr* ip, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport,
                               uint16_t len, uint32_t tail_sum = 0, uint16_t summed_from = UINT16_MAX);
    // The same, for a payload the caller has summed whole (`payload_sum`: its in-memory-order
    // one's-complement sum, unfolded): nothing is read. Inline: a cache hit answered in place ends
    // with it, and as a call it took arguments on the stack (a twentieth of a hit in `perf`).
    [[gnu::always_inline]] static void write_udp_ipv4_summed(rte_ipv4_hdr* ip, uint32_t src, uint32_t dst,
                                                             uint16_t sport, uint16_t dport, uint16_t len,
                                                             uint64_t payload_sum) {
        const uint16_t udp_len = static_cast<uint16_t>(sizeof(rte_udp_hdr) + len);
        const uint16_t ip_len = static_cast<uint16_t>(sizeof(rte_ipv4_hdr) + udp_len);
        const uint32_t addrs = halves_sum(src) + halves_sum(dst);
        const uint16_t ip_sum = ipv4_header_checksum(addrs, ip_len);
        uint16_t udp_sum = static_cast<uint16_t>(~fold_sum(uint64_t{addrs} + stored16(kIpProtoUdp) + stored16(udp_len) +
                                                           sport + dport + stored16(udp_len) + payload_sum));
        if (udp_sum == 0) udp_sum = 0xffff;  // 0 would mean "no checksum"
        store_udp_ipv4(ip, src, dst, sport, dport, len, ip_sum, udp_sum);
    }
    // The checksum field (as it sits in memory) of the IPv4 header those writers lay down, for a
    // total length of `ip_len` and addresses whose halves_sum()s add to `addrs`.
    [[gnu::always_inline]] static uint16_t ipv4_header_checksum(uint32_t addrs, uint16_t ip_len) {
        return static_cast<uint16_t>(~fold_sum(uint64_t{addrs} + kStoredVersionTos + stored16(ip_len) + kStoredDf + kStoredTtlProto));
    }
    // The 28 bytes of IPv4 and UDP headers in front of a payload of `len` bytes, the two checksum
    // fields as given (as they sit in memory), written as three 64-bit stores and one 32-bit one.
    // What both writers above and write_udp_ipv4_headers() lay down.
    [[gnu::always_inline]] static void store_udp_ipv4(rte_ipv4_hdr* ip, uint32_t src, uint32_t dst, uint16_t sport,
                                                      uint16_t dport, uint16_t len, uint16_t ip_sum, uint16_t udp_sum) {
        const uint16_t len_udp = stored16(static_cast<uint16_t>(sizeof(rte_udp_hdr) + len));
        const uint16_t len_ip = stored16(static_cast<uint16_t>(sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + len));
        // Four 16-bit fields in memory order as one 64-bit word.
        const auto words = [](uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
#if RTE_BYTE_ORDER == RTE_LITTLE_ENDIAN
            return a | b << 16 | c << 32 | d << 48;
#else
            return a << 48 | b << 32 | c << 16 | d;
#endif
        };
        // An address (network order) already is its four bytes in memory order: it goes into its
        // word whole. (Split into halves, one half was spilled as 32 bits and reloaded as 64, a
        // load that store forwarding cannot serve: a tenth of a cache hit waited on it in `perf`.)
#if RTE_BYTE_ORDER == RTE_LITTLE_ENDIAN
        const uint64_t src_word = uint64_t{src} << 32, dst_word = dst;
#else
        const uint64_t src_word = src, dst_word = uint64_t{dst} << 32;
#endif
        // Version/IHL and TOS, the total length, ID 0, "don't fragment"; TTL and protocol, the
        // header sum, the addresses; the ports; the UDP length and sum.
        const uint64_t w0 = words(kStoredVersionTos, len_ip, 0, kStoredDf);
        const uint64_t w1 = words(kStoredTtlProto, ip_sum, 0, 0) | src_word;
        const uint64_t w2 = dst_word | words(0, 0, sport, dport);
        const uint32_t w3 = static_cast<uint32_t>(words(len_udp, udp_sum, 0, 0) >> (RTE_BYTE_ORDER == RTE_LITTLE_ENDIAN ? 0 : 32));
        auto* p = reinterpret_cast<uint8_t*>(ip);
        std::memcpy(p, &w0, 8);
        std::memcpy(p + 8, &w1, 8);
        std::memcpy(p + 16, &w2, 8);
        std::memcpy(p + 24, &w3, 4);
    }
    // The fixed 16-bit fields of those headers as they sit in memory.
    static constexpr uint16_t kStoredVersionTos = stored16(RTE_IPV4_VHL_DEF << 8);
    static constexpr uint16_t kStoredDf = stored16(RTE_IPV4_HDR_DF_FLAG);
    static constexpr uint16_t kStoredTtlProto = stored16(kDefaultTtl << 8 | kIpProtoUdp);
    // The in-memory-order sum (unfolded) of encode(h)'s 20 bytes, from h's values: a sender that has
    // just encoded a header sums it without reading it back (which stalls on store forwarding).
    // Inline, so that a caller's constant fields fold away.
    static uint32_t header_sum(const Header& h) {
        // Two bytes in a row sum as the 16-bit word they make in network order.
        const auto pair = [](uint8_t first, uint8_t second) { return stored16(static_cast<uint16_t>(first << 8 | second)); };
        return uint32_t{stored16(kMsgMagic)} + pair(kMsgVersion, static_cast<uint8_t>(h.type)) + stored16(h.sender_party) +
               stored16(h.body_len) + stored64_sum(h.seq) + pair(h.channel, h.key_id);
    }
    // The same headers with both checksum fields 0 (for a device that fills them in).
    static void write_udp_ipv4_headers(rte_ipv4_hdr* ip, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport,
                                       uint16_t len);
    // Which port and next hop reach `dst` (network order); -1 if none. Pure; any thread.
    static int route(const std::vector<DpPortConfig>& ports, uint32_t dst, uint32_t* next_hop);

private:
    struct Port {
        DpPortConfig cfg;
        uint32_t mask = 0;  // network order
        PortCounters counters;
        std::atomic<uint64_t> neigh_entries{0};
        uint16_t tx_len = 0;
        rte_mbuf* tx[kTxQueueLen];
    };

    // What every packet's checks read of the port it arrived on, packed together: in Port these
    // fields sit between counters and the TX queue, and owns_address() read a line of each port.
    struct PortCheck {
        uint64_t mac = 0;               // the port's MAC as mac48() reads it from a frame
        uint32_t subnet_broadcast = 0;  // network order; 0 when the prefix has none (/31, /32, /0)
        // answer_hit_in_place() may answer a request that came in here: [resolve] hits_in_place on,
        // a resolver, an internal port, and this worker the one a client's request stays with (the
        // only worker, or an RSS port's queue: owner_of()).
        bool answers_in_place = false;
    };
    // The 6 bytes at `p` as the low 48 bits of a word (memory order): a MAC compared in one go.
    // Reads 8 bytes: both MACs of a 14-byte Ethernet header (at 0 and 6) may be read so.
    static uint64_t mac48(const uint8_t* p) {
        uint64_t w;
        std::memcpy(&w, p, 8);
#if RTE_BYTE_ORDER == RTE_LITTLE_ENDIAN
        return w & 0xffffffffffffull;
#else
        return w >> 16;
#endif
    }
    static constexpr uint64_t kBroadcastMac48 = 0xffffffffffffull;
    // handle()'s checks of the Ethernet header, shared with the
    // established-flow path: to this port's MAC or broadcast; from a unicast, non-zero one.
    [[gnu::always_inline]] bool l2_for_us(const uint8_t* frame, uint16_t in) const {
        const uint64_t dst = mac48(frame);
        return dst == checks_[in].mac || dst == kBroadcastMac48;
    }
    [[gnu::always_inline]] static bool l2_source_ok(const uint8_t* frame) {
        return (frame[6] & 1) == 0 && mac48(frame + 6) != 0;  // the group bit: replies go back there
    }
    // handle_ipv4()'s check of the source address (network order), shared likewise: not 0, not the
    // limited or this port's subnet broadcast, not multicast, not one of ours.
    [[gnu::always_inline]] bool ipv4_source_ok(uint32_t src, uint16_t in) const {
        const uint32_t host = rte_be_to_cpu_32(src);
        return host + 1 > 1 && (host >> 28) != 0xe && src != checks_[in].subnet_broadcast && !owns_address(src);
    }

    // parse_packet() on the frame, with the port's verdict on the IPv4 header checksum where the
    // mbuf carries one (RX checksum offload).
    static DropReason parse(const rte_mbuf* m, ParsedPacket& p);
    static RxChecksum rx_ip_checksum(const rte_mbuf* m);  // the port's verdict on the IPv4 header sum
    // parse_fast() on the frame, and the checks handle() and handle_ipv4() make before the NAT:
    // `flow` when the NAT's established-flow path may take it (Nat::forward_established), which
    // then leaves nothing for the full path to decide (the source is vouched for by the session
    // the packet must match there); `service` for a datagram to the resolution or RoCE port, which
    // handle() takes from parsed_of_fast() with no second parse and no flow hash; `none` for the
    // rest (parsed in full). Not for a standby (the caller asks only when active: a standby's
    // packets all take the full path).
    enum class FastKind : uint8_t { none, flow, service };
    // A UDP datagram to the resolution port, or anything to the RoCE port: never a session's.
    bool is_service(uint8_t ip_proto, uint16_t dst_port_be) const {
        return dst_port_be == roce_port_be_ || (ip_proto == kIpProtoUdp && dst_port_be == resolve_port_be_);
    }
    FastKind fast_candidate(const rte_mbuf* m, uint16_t in, FastPacket& f) const;
    // send_ipv4() inline for its common case, the next hop's entry still vouched for by `memo`
    // (NeighbourTable::recall): the MACs written and the frame queued, no call; returns that entry.
    // Anything else (no memo, an entry to look up or probe, a standby) is send_ipv4()'s, and
    // returns null. A message the lcore finishes leaves this way, and a cache hit answered in
    // place whose ReplyRoute's MACs no longer hold (reply_l2).
    const Neighbour* send_ipv4_memo(rte_mbuf* m, uint16_t out, uint32_t next_hop, uint16_t* memo);
    // A frame's first 12 bytes, the next hop's MAC and the port's, kept as two words so that a packet
    // to a next hop already looked up takes them in two stores (a burst's established flows to the
    // same hop; a cache hit's reply to a requester while its ReplyRoute's MACs hold).
    struct FrameHead {
        uint64_t lo = 0;  // bytes 0-7
        uint32_t hi = 0;  // bytes 8-11
        [[gnu::always_inline]] static FrameHead of(const Neighbour& n, const rte_ether_addr& port_mac) {
            unsigned char l2[12];
            std::memcpy(l2, n.mac.data(), RTE_ETHER_ADDR_LEN);
            std::memcpy(l2 + RTE_ETHER_ADDR_LEN, &port_mac, RTE_ETHER_ADDR_LEN);
            FrameHead h;
            std::memcpy(&h.lo, l2, 8);
            std::memcpy(&h.hi, l2 + 8, 4);
            return h;
        }
        [[gnu::always_inline]] void write(uint8_t* eth) const {
            std::memcpy(eth, &lo, 8);
            std::memcpy(eth + 8, &hi, 4);
        }
    };
    // The frame's MACs for `n` (a next hop recall() vouched for) out of port `out`, and onto its TX queue.
    void queue_to(rte_mbuf* m, uint16_t out, const Neighbour& n);
    // The frame onto the port's TX queue as it is, the queue flushed first when full.
    void enqueue(Port& port, rte_mbuf* m);
    void handle(rte_mbuf* m, uint16_t in);  // parses, then as below (a packet another worker counted)
    // `parsed`: parse_packet's verdict on it; `flow_hash`: Nat::prefetch_session's value, or
    // kNoFlowHash. RX counters are the caller's (a burst at a time).
    void handle(rte_mbuf* m, uint16_t in, const ParsedPacket& p, DropReason parsed, uint64_t flow_hash);
    // One RX burst of port `in`, at most kRxBurst packets: parse all (parse_fast where it can), hash
    // the TCP/UDP ones and prefetch their session slots, prefetch the sessions, then forward each of
    // a session's plain packets on the established-flow path and handle the others in full.
    void handle_burst(rte_mbuf** pkts, uint16_t n, uint16_t in);
    void handle_arp(rte_mbuf* m, uint16_t in, const ParsedPacket& p);
    // Learns (or refreshes) the ARP sender as handle_arp does and sends what waited for it.
    void learn_from_arp(uint16_t in, const rte_arp_hdr& arp, bool for_us);
    // Hand-off between workers: the packet (as it arrived on port `in`) to worker `to`'s ring, in
    // bursts at the end of the poll; a copy of an ARP packet to every other worker to learn from.
    void hand_off(rte_mbuf* m, uint16_t in, uint16_t to, uint8_t kind);
    void flush_hand_offs();
    void take_hand_offs(uint32_t* handled);
    void handle_ipv4(rte_mbuf* m, uint16_t in, const ParsedPacket& p, uint64_t flow_hash);
    void handle_local_icmp(rte_mbuf* m, uint16_t in, const ParsedPacket& p);
    void handle_inject(rte_mbuf* m);
    void handle_resolve(rte_mbuf* m, uint16_t in, const ParsedPacket& p);
    // handle_resolve()'s check of a datagram's UDP checksum: the port's verdict (RX offload) where
    // the mbuf carries one, else summed here. kFixedLen: l4_len where the caller knows it (a
    // resolve request's 36 bytes), summed by raw_sum_fixed() with the addresses in front of it (so
    // `udp` must follow a 20-byte header); 0: any length.
    enum class UdpChecksum : uint8_t {
        bad,
        vouched,  // none sent, or the port says good: the field itself may not be right
        summed,   // summed here and right: the field is the datagram's true checksum
    };
    template <uint16_t kFixedLen = 0>
    static UdpChecksum udp_checksum(const rte_mbuf* m, const rte_ipv4_hdr* ip, const rte_udp_hdr* udp, uint16_t l4_len);
    // A datagram parse_fast() read (`f`) that is a client's resolve request the cache answers (a
    // record, not "not found"): answered from the burst loop with the reply written where the
    // request is (the header and addresses changed in place, the requester's route and neighbour
    // remembered). The caller has checked where the general path would do something else: `f` is
    // UDP to the resolution port at the address of the port it came in on (a request to another
    // of our addresses, weak host model, is as much ours, and the general path answers it), a port
    // whose requests this worker answers (PortCheck::answers_in_place: not the external port, not
    // another worker's), the frame long enough for a request, whose target is `target` (as read
    // from it), and `first` the entry its cache bucket held (Resolver::prefetch_entry, this poll).
    // Gives the frame the general path gives; the caller counts the true returns as
    // handle_resolve(), Resolver::request() and reply_hit() count a hit (handle_burst: once a
    // burst). False, with nothing changed or counted, for anything else (the general path takes it).
    bool answer_hit_in_place(rte_mbuf* m, const FastPacket& f, ProcessId target, const CacheEntry* first);
    // reply_hit()'s body: written in place at `body`; returns its sum for finish_message()
    // (summed_from 0). Counts nothing.
    uint32_t write_hit_body(uint8_t* body, ProcessId target, AnswerSource source, const CacheEntry& e);
    // write_hit_body() but the target: status, source, reserved and the record written, and their sum.
    uint32_t write_hit_record(uint8_t* body, AnswerSource source, const CacheEntry& e);
    void handle_roce(rte_mbuf* m, uint16_t in, const ParsedPacket& p);
    void handle_peer_message(rte_mbuf* m, uint16_t in, const ParsedPacket& p, const ParsedMsg& msg);
    // To the control threads, counted also as `kind` (when not null).
    void punt(rte_mbuf* m, uint16_t in, Counter* kind);
    // After a poll that handed the control threads something: rings their doorbell if they sleep.
    void wake_control();
    // Builds and routes one resolution datagram from our address on the way to `dst` (network order).
    // A peer message (peer >= 0) is stamped with our channel-0 seq and sealed with the peer's key.
    // `body_sum`: the one's-complement sum (unfolded, in-memory order) of the body from `summed_from`
    // on (an even offset), known already: the UDP checksum then reads only the header and the body
    // before it; with `summed_from` 0 (a client message) nothing at all, the header's sum coming from
    // its values (header_sum). UINT16_MAX (or any offset past the body): everything is read.
    void send_message(uint32_t dst, uint16_t dst_port, MsgType type, uint64_t seq_or_id, const void* body,
                      uint16_t body_len, int peer, uint32_t body_sum = 0, uint16_t summed_from = UINT16_MAX);
    // send_message() in two halves, for a caller that writes the body straight into the packet (a
    // body built elsewhere and copied in was read back while its stores were still in flight):
    // start_message() routes, takes an mbuf and writes the message header, leaving `body` to fill
    // (null when the datagram was dropped, counted); finish_message() as send_message() after its copy.
    struct OutMessage {
        rte_mbuf* m = nullptr;
        uint8_t* body = nullptr;
        rte_ipv4_hdr* ip = nullptr;
        Header h{};
        uint32_t dst = 0, nh = 0;
        uint16_t dst_port = 0, out = 0, msg_len = 0;
        int peer = -1;
        uint16_t* neigh = nullptr;  // the sender's memo of the next hop's neighbour entry (send_ipv4)
        OutMessage() = default;
        // Member by member: a braced aggregate was first cleared whole with a `rep stos` (6% of a
        // cache hit in `perf`).
        OutMessage(rte_mbuf* m_, uint8_t* body_, rte_ipv4_hdr* ip_, const Header& h_, uint32_t dst_, uint32_t nh_,
                   uint16_t dst_port_, uint16_t out_, uint16_t msg_len_, int peer_, uint16_t* neigh_)
            : m(m_), body(body_), ip(ip_), h(h_), dst(dst_), nh(nh_), dst_port(dst_port_), out(out_), msg_len(msg_len_),
              peer(peer_), neigh(neigh_) {}
    };
    OutMessage start_message(uint32_t dst, uint16_t dst_port, MsgType type, uint64_t seq_or_id, uint16_t body_len,
                             int peer);
    void finish_message(OutMessage& o, uint32_t body_sum = 0, uint16_t summed_from = UINT16_MAX);
    // ResolverIo
    void reply(const Requester& r, ProcessId target, ResolveStatus status, AnswerSource source,
               const DmaAddress* record) override;
    void reply_hit(const Requester& r, ProcessId target, AnswerSource source, const CacheEntry& e) override;
    void query(int peer, uint64_t query_id, ProcessId target, QueryMode mode) override;
    void learned(ProcessId key, const DmaAddress* record, uint16_t owner_party) override;
    void answer(DpRequest& r);
    // Carries out the NAT's verdict; false when the packet is not the NAT's (the caller goes on).
    bool act(rte_mbuf* m, uint16_t in, const Nat::Verdict& v);
    // Addresses the frame to the next hop's MAC and queues it, or holds it while ARP asks. `memo`
    // (a session's NatRewrite::neigh): the entry it names is used without a lookup while
    // NeighbourTable::recall() vouches for it, and is filled in when a lookup finds one reachable.
    void send_ipv4(rte_mbuf* m, uint16_t out, uint32_t next_hop, uint16_t* memo = nullptr);
    // Gratuitous ARP for our address on port `out`: neighbours point it at this gateway's MAC.
    void send_gratuitous_arp(uint16_t out);
    // The standby flag read once per poll; on the turn to active, gratuitous ARP now and twice more.
    void follow_role();
    void send_arp_request(uint16_t out, uint32_t target_ip);
    void tx(rte_mbuf* m, uint16_t out);
    // Addresses the frame from port `out`'s MAC to `dst` and queues it there.
    void tx_to(rte_mbuf* m, uint16_t out, const rte_ether_addr& dst);
    void flush();
    void drop(rte_mbuf* m, uint16_t port, DropReason r);
    // A bit per port address among 64 (addr_bit()): most addresses, none of ours, are told apart by
    // one test, and only the rest look at each port's.
    static unsigned addr_bit(uint32_t ip) { return (ip * 0x9e3779b1u) >> 26; }
    bool owns_address(uint32_t ip) const {
        if (((addr_filter_ >> addr_bit(ip)) & 1) == 0) return false;
        for (std::size_t i = 0; i < nports_; ++i)
            if (addrs_[i] == ip) return true;
        return false;
    }
    // Timers and the idle-session sweep, a bounded slice per busy poll (see kHousekeepingSlice).
    void housekeeping(bool busy);
    void publish_gauges();  // the gauges the control threads read
    void flush_session_events();  // the NAT's event log to rings_.session_events; what does not fit is lost
    uint64_t now_ms() const { return clock_.ms(rte_get_tsc_cycles()); }
    bool rings_have_work() const;  // requests, inject or hand-offs waiting (the doorbell's last look)

    std::unique_ptr<Port[]> ports_;  // fixed at construction: counters never move
    std::size_t nports_;
    std::unique_ptr<PortCheck[]> checks_;  // by port index, from ports_'s configuration
    std::unique_ptr<uint32_t[]> addrs_;    // each port's address (network order), for owns_address()
    uint64_t addr_filter_ = 0;             // bit addr_bit(a) set for each a of addrs_
    std::vector<DpPortConfig> port_cfgs_;  // for route(); off the per-packet path
    static int route_for_nat(const void* self, uint32_t dst, uint32_t* next_hop);
    static bool source_ok_for_nat(const void* self, uint32_t src, uint16_t port);  // ipv4_source_ok() for the NAT
    static std::vector<NatPort> nat_ports(const std::vector<DpPortConfig>& ports);
    LcoreCounters counters_;
    NeighbourTable neigh_;
    PortMapView empty_maps_;  // used when no maps are shared (tests of the responder alone)
    Nat nat_;
    DpShared shared_;
    std::atomic<uint64_t> sessions_gauge_{0};
    std::atomic<uint64_t> pool_free_[2][kL4Protos] = {};
    std::atomic<uint64_t> neigh_entries_{0};
    rte_mempool* pool_;
    DpRings rings_;
    IdleConfig idle_;
    TickClock clock_;  // TSC ticks to milliseconds
    uint64_t poll_tsc_ = 0;  // the TSC as the poll began: now_ms_ and the idle back-off's clock
    uint64_t now_ms_ = 0;
    uint64_t next_tick_ms_ = 0;
    static constexpr uint32_t kNoPass = UINT32_MAX;
    uint32_t neigh_cursor_ = kNoPass;  // the neighbour pass under way: its next slot
    uint64_t sweep_ms_ = 0;            // the clock the sweep credit was last earned at
    uint64_t sweep_credit_ = 0;        // sessions the sweep may still look at

    // The resolution service (null members when it is off).
    DpResolveConfig resolve_cfg_;
    uint16_t resolve_port_be_ = 0;
    uint16_t roce_port_be_ = 0;  // 0 when shared_.roce is null
    std::vector<DpPeerState> peers_;
    std::unique_ptr<Resolver> resolver_;
    SeqClock seq_;  // our channel 0
    rte_mbuf* spare_ = nullptr;  // a request's mbuf, free for the reply send_message builds next
    // Where replies to a requester go (answer_hit_in_place): route() of its address, fixed as the
    // ports are, and a memo of its neighbour entry; direct-mapped by address (0: empty, never a
    // requester's). With what follows from the route and the address alone, as fixed: the reply's
    // source (the port's address), its IPv4 header's checksum (every other field of that header
    // is a constant for a hit's reply), and whether the port sums checksums on transmit.
    // And the reply's MACs (a FrameHead) as the neighbour entry gave them, while the table's
    // version() is `l2_version` and the clock before `l2_until` (the entry's reachable time):
    // NeighbourTable::recall() would give the same entry, unread (reply_l2() fills them).
    struct ReplyRoute {
        uint32_t ip = 0, nh = 0;
        uint16_t out = 0, neigh = 0;
        uint32_t src = 0;
        uint16_t ip_sum = 0;
        bool tx_cksum = false;
        uint32_t l2_version = 0;
        FrameHead l2 = {};
        uint64_t l2_until = 0;  // 0: not filled
    };
    static_assert(sizeof(ReplyRoute) == 48);
    static constexpr std::size_t kReplyRoutes = 256;
    std::array<ReplyRoute, kReplyRoutes> reply_routes_{};
    // A cache hit's reply out by its route when `rr`'s MACs no longer hold: send_ipv4_memo()'s
    // work, and rr's MACs filled from the entry recall() gives.
    void reply_l2(rte_mbuf* m, ReplyRoute& rr);
    bool wake_pending_ = false;  // this poll enqueued to punt or events
    ResolveDpCounters resolve_counters_;

    // Workers.
    DpWorker worker_;
    uint16_t queue_ = 0;            // this worker's RX/TX queue on every port
    uint16_t nat_lo_ = 0, nat_hi_ = 0;  // session ports (host order): their worker is port % count
    bool from_hand_off_ = false;    // the packet being handled came from another worker
    const std::atomic<bool>* standby_src_ = nullptr;  // DpShared::standby
    bool standby_ = false;          // as read at the start of this poll
    uint8_t garp_left_ = 0;         // gratuitous ARP rounds still to send after a takeover
    uint64_t garp_next_ms_ = 0;
    struct HandOffBuf {
        uint16_t len = 0;
        rte_mbuf* pkts[kBurst];
    };
    std::unique_ptr<HandOffBuf[]> hand_out_;  // one per worker (its own unused)
};

}  // namespace fedgate
