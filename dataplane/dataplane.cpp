// The data-plane loop and its packet handlers. Shape follows DPDK's l2fwd/l3fwd: the loop first,
// then the handlers it calls.
#include "dataplane/dataplane.hpp"

#include "dataplane/checksum.hpp"

#include <rte_arp.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_hash_crc.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>
#include <rte_udp.h>

#include <unistd.h>

#include <algorithm>
#include <utility>
#include <stdexcept>

#include <cstring>
#include <new>
#include <type_traits>

namespace fedgate {
namespace {

constexpr int kPrefetchAhead = 3;
constexpr uint8_t kIcmpUnreachable = 3, kIcmpTimeExceeded = 11, kIcmpParamProblem = 12;

// What a packet in a hand-off ring is for, kept in the mbuf's hash.usr beside its arrival port.
constexpr uint8_t kHandOffPacket = 1;  // handle it as if it had arrived here
constexpr uint8_t kHandOffArpCopy = 2; // a copy of an ARP packet: learn the sender, then free it

uint32_t prefix_mask(uint8_t len) { return rte_cpu_to_be_32(len == 0 ? 0 : ~uint32_t{0} << (32 - len)); }

MacAddr to_mac(const rte_ether_addr& a) {
    MacAddr m;
    std::memcpy(m.data(), a.addr_bytes, m.size());
    return m;
}

rte_ether_addr from_mac(const MacAddr& m) {
    rte_ether_addr a;
    std::memcpy(a.addr_bytes, m.data(), m.size());
    return a;
}

template <typename T>
T* at(rte_mbuf* m, uint32_t off) { return rte_pktmbuf_mtod_offset(m, T*, off); }

}  // namespace

std::vector<NatPort> Dataplane::nat_ports(const std::vector<DpPortConfig>& ports) {
    std::vector<NatPort> out;
    for (const DpPortConfig& p : ports) out.push_back(NatPort{p.role == PortRole::external, p.addr});
    return out;
}

int Dataplane::route_for_nat(const void* self, uint32_t dst, uint32_t* next_hop) {
    return route(static_cast<const Dataplane*>(self)->port_cfgs_, dst, next_hop);
}

bool Dataplane::source_ok_for_nat(const void* self, uint32_t src, uint16_t port) {
    return static_cast<const Dataplane*>(self)->ipv4_source_ok(src, port);
}

std::vector<DpPeerState> make_peer_table(const std::vector<DpPeer>& peers, uint64_t start_seq, PeerVerifyLimit limit) {
    std::vector<DpPeerState> table;
    table.reserve(peers.size());
    for (const DpPeer& p : peers)
    {
        DpPeerState& st = table.emplace_back(
            DpPeerState{p, PeerKeys({p.key, p.key_id}, {p.next_key, p.next_key_id}), {}, {}, false});
        for (ReplayWindow& w : st.windows) w = ReplayWindow(start_seq);
        if (limit.rate != 0) {
            st.verify_budget = TokenBucket(limit.rate, std::max<uint32_t>(1, limit.burst));
            st.limited = true;
        }
    }
    return table;
}

void carry_over_replay_windows(const std::vector<DpPeerState>& old, std::vector<DpPeerState>& next) {
    for (DpPeerState& n : next)
        for (const DpPeerState& o : old)
            if (o.cfg.addr == n.cfg.addr && o.cfg.party == n.cfg.party) {
                std::copy(std::begin(o.windows), std::end(o.windows), std::begin(n.windows));
                break;
            }
}

Dataplane::Dataplane(const DataplaneConfig& cfg, const std::vector<DpPortConfig>& ports, rte_mempool* pool,
                     DpRings rings, DpShared shared, DpWorker worker)
    : ports_(std::make_unique<Port[]>(ports.size())),
      nports_(ports.size()),
      checks_(std::make_unique<PortCheck[]>(ports.size())),
      addrs_(std::make_unique<uint32_t[]>(ports.size())),
      port_cfgs_(ports),
      neigh_(cfg.neighbour_capacity, cfg.neighbour),
      nat_(cfg.nat, nat_ports(ports), shared.maps != nullptr ? shared.maps : &empty_maps_, route_for_nat, this),
      shared_(shared),
      pool_(pool),
      rings_(rings),
      idle_(cfg.idle),
      clock_(rte_get_tsc_hz()),
      worker_(std::move(worker)),
      queue_(worker_.index),
      nat_lo_(cfg.nat.port_lo),
      nat_hi_(cfg.nat.port_hi) {
    if (worker_.count == 0 || worker_.count > kMaxWorkers || worker_.index >= worker_.count ||
        (worker_.count > 1 && worker_.handoff.size() != worker_.count))
        throw std::invalid_argument("data-plane worker " + std::to_string(worker_.index) + " of " +
                                    std::to_string(worker_.count) + ": bad worker index, count or hand-off rings");
    if (worker_.count > 1) hand_out_ = std::make_unique<HandOffBuf[]>(worker_.count);
    for (std::size_t i = 0; i < nports_; ++i) {
        ports_[i].cfg = ports[i];
        ports_[i].mask = prefix_mask(ports[i].prefix_len);
        uint8_t mac[8] = {};
        std::memcpy(mac, ports[i].mac.addr_bytes, RTE_ETHER_ADDR_LEN);
        checks_[i].mac = mac48(mac);
        checks_[i].subnet_broadcast =
            ports[i].prefix_len == 0 || ports[i].prefix_len >= 31 ? 0 : ports[i].addr | ~ports_[i].mask;
        addrs_[i] = ports[i].addr;
        addr_filter_ |= uint64_t{1} << addr_bit(ports[i].addr);
        for (const auto& [ip, mac] : ports[i].static_neighbours)
            if (!neigh_.add_permanent(static_cast<uint16_t>(i), ip, mac))
                throw std::invalid_argument("neighbour table too small for the static neighbours");
    }
    if (shared.roce != nullptr) roce_port_be_ = rte_cpu_to_be_16(kRoceV2Port);
    // What ipv4_source_ok() reads (checks_, addrs_, addr_filter_) is fixed from here on, as the
    // NAT's check needs.
    nat_.set_source_check(source_ok_for_nat, this);
    nat_.log_events(rings.session_events != nullptr);
    standby_src_ = shared.standby;
    standby_ = standby_src_ != nullptr && standby_src_->load(std::memory_order_acquire);
    if (shared.cache != nullptr && cfg.resolve.port != 0) {
        resolve_cfg_ = cfg.resolve;
        resolve_port_be_ = rte_cpu_to_be_16(cfg.resolve.port);
        resolve_cfg_.resolver.peer_parties.clear();
        // Our own clock starts each window: messages stamped before we started are refused.
        peers_ = make_peer_table(cfg.resolve.peers, SeqClock::realtime_ns(), cfg.resolve.peer_verify);
        for (const DpPeer& p : cfg.resolve.peers) resolve_cfg_.resolver.peer_parties.push_back(p.party);
        // Our queries carry our index, so the answer comes back to us whichever worker takes it in.
        resolve_cfg_.resolver.query_tag = static_cast<uint8_t>(worker_.index);
        resolver_ = std::make_unique<Resolver>(resolve_cfg_.resolver, *shared.cache, static_cast<ResolverIo&>(*this));
        for (std::size_t i = 0; i < nports_; ++i)
            checks_[i].answers_in_place = resolve_cfg_.hits_in_place && ports[i].role != PortRole::external &&
                                          (worker_.count == 1 || ports[i].rss);
    }
    now_ms_ = now_ms();
}

Dataplane::~Dataplane() {
    flush();
    if (hand_out_)
        for (uint16_t w = 0; w < worker_.count; ++w)
            for (uint16_t j = 0; j < hand_out_[w].len; ++j) rte_pktmbuf_free(hand_out_[w].pkts[j]);
    // Packets still waiting for a neighbour go back to the pool.
    neigh_.clear([](Neighbour& n) { rte_pktmbuf_free(n.held); });
}

// ---------------------------------------------------------------------------------------------
// The loop.

void Dataplane::run(const std::atomic<bool>& quit) {
    std::array<RxQueueRef, IdleWaiter::kMaxPollFds> rxqs{};
    const std::size_t nrxq = std::min(nports_, rxqs.size());
    for (std::size_t i = 0; i < nrxq; ++i) rxqs[i] = {ports_[i].cfg.port_id, queue_};
    // Built here, on the lcore: it sets this thread's timer slack and epoll registrations.
    LcoreWake* const bell = rings_.bell;
    IdleWaiter waiter(std::span<const RxQueueRef>(rxqs.data(), nrxq), bell != nullptr ? bell->fd : -1);
    IdleConfig idle_cfg = idle_;
    // Without a doorbell, other workers' hand-offs and control requests come on rings that wake
    // nothing: then no waits past max_sleep_us.
    if (bell == nullptr) idle_cfg.deep_after_waits = UINT32_MAX;
    IdleBackoff idle(idle_cfg, waiter.wakeable(), (rte_get_tsc_hz() + 999'999) / 1'000'000);
    rte_rcu_qsbr* rcu = shared_.rcu;
    const unsigned me = shared_.rcu_thread;
    if (rcu != nullptr) {
        rte_rcu_qsbr_thread_register(rcu, me);
        rte_rcu_qsbr_thread_online(rcu, me);
    }
    while (!quit.load(std::memory_order_relaxed)) {
        const uint32_t handled = poll_once();
        // Nothing from the maps is held across polls: this is a quiescent state.
        if (rcu != nullptr) rte_rcu_qsbr_quiescent(rcu, me);
        const uint32_t us = idle.after_poll(handled, poll_tsc_);  // the poll's start: a TSC read saved
        if (idle.yielding()) {
            counters_.idle_yields.add();
            sched_yield();
        } else if (us != 0) {
            counters_.idle_sleeps.add();
            // Offline while asleep, so a control thread waiting for a grace period does not wait on us.
            if (rcu != nullptr) rte_rcu_qsbr_thread_offline(rcu, me);
            bool wait = true;
            if (bell != nullptr) {
                bell->sleeping.store(true, std::memory_order_relaxed);
                // Pairs with LcoreWake::ring(): work enqueued before the ringer could see the flag
                // is in the rings now, so it is not slept through.
                std::atomic_thread_fence(std::memory_order_seq_cst);
                wait = !rings_have_work();
            }
            if (wait) waiter.wait(us);
            if (bell != nullptr) {
                // Down whether or not anyone rang (a ringer that found it up took it down). The
                // eventfd is read (non-blocking) only when the wait saw it readable: a token a
                // ringer writes after the wait ended only ends the next wait early, once, and is
                // read then; no system call after the waits traffic ends.
                if (!bell->sleeping.exchange(false, std::memory_order_relaxed)) counters_.doorbell_wakeups.add();
                if (waiter.doorbell_rang()) {
                    uint64_t tokens;
                    (void)!::read(bell->fd, &tokens, sizeof tokens);
                }
            }
            if (rcu != nullptr) rte_rcu_qsbr_thread_online(rcu, me);
        }
    }
    flush();
    if (rcu != nullptr) {
        rte_rcu_qsbr_thread_offline(rcu, me);
        rte_rcu_qsbr_thread_unregister(rcu, me);
    }
}

bool Dataplane::rings_have_work() const {
    return (rings_.requests != nullptr && rte_ring_count(rings_.requests) != 0) ||
           (rings_.inject != nullptr && rte_ring_count(rings_.inject) != 0) ||
           (hand_out_ && rte_ring_count(worker_.handoff[worker_.index]) != 0);
}

uint32_t Dataplane::poll_once() {
    counters_.polls.add();
    poll_tsc_ = rte_get_tsc_cycles();
    now_ms_ = clock_.ms(poll_tsc_);
    if (standby_src_ != nullptr) follow_role();
    uint32_t handled = 0;
    rte_mbuf* pkts[kRxBurst];

    for (uint16_t in = 0; in < nports_; ++in) {
        const uint16_t n = rte_eth_rx_burst(ports_[in].cfg.port_id, queue_, pkts, kRxBurst);
        if (n != 0) handle_burst(pkts, n, in);
        handled += n;
    }

    if (hand_out_) take_hand_offs(&handled);

    if (rings_.inject != nullptr) {
        const unsigned n = rte_ring_sc_dequeue_burst(rings_.inject, reinterpret_cast<void**>(pkts), kBurst, nullptr);
        for (unsigned j = 0; j < n; ++j) handle_inject(pkts[j]);
        counters_.injected.add(n);
        handled += n;
    }

    if (rings_.requests != nullptr) {
        void* reqs[4];
        const unsigned n = rte_ring_sc_dequeue_burst(rings_.requests, reqs, 4, nullptr);
        for (unsigned j = 0; j < n; ++j) answer(*static_cast<DpRequest*>(reqs[j]));
    }

    housekeeping(handled != 0);
    if (!nat_.events().empty()) flush_session_events();
    if (hand_out_) flush_hand_offs();
    flush();
    wake_control();
    if (handled != 0) counters_.busy_polls.add();
    return handled;
}

void Dataplane::flush_session_events() {
    const std::span<const SessionEvent> ev = nat_.events();
    const unsigned n = rte_ring_mp_enqueue_burst_elem(rings_.session_events, ev.data(), sizeof(SessionEvent),
                                                      static_cast<unsigned>(ev.size()), nullptr);
    if (n < ev.size()) nat_.events_lost(static_cast<uint32_t>(ev.size() - n));
    nat_.clear_events();
}

// ---------------------------------------------------------------------------------------------
// Classification.

[[gnu::always_inline]] inline Dataplane::FastKind Dataplane::fast_candidate(const rte_mbuf* m, uint16_t in,
                                                                             FastPacket& f) const {
    const uint8_t* d = rte_pktmbuf_mtod(m, const uint8_t*);
    if (!parse_fast(d, rte_pktmbuf_data_len(m), rx_ip_checksum(m), f)) return FastKind::none;
    // handle()'s checks of the Ethernet header (parse_fast took at least 42 bytes).
    if (!l2_for_us(d, in) || !l2_source_ok(d)) return FastKind::none;
    // The resolution service's and RoCE's datagrams are not the NAT's (and owner_of() steers
    // anything to the RoCE port by its flow, not as a session port): handle_ipv4()'s check of the
    // source here. A flow's packet is checked by its session instead: one that matches a session
    // key on the port the session takes it from has a source that passed ipv4_source_ok() there
    // when the session opened (Nat::set_source_check); any other leaves the established-flow path
    // for the full one, which checks it (handle_ipv4). A session's packet needs no hand-off: every
    // session key names one of our addresses, and a worker holds only the sessions of packets
    // owner_of() gave it (its session ports' replies, its flows), so a session found here (on the
    // port its direction arrives on) is this worker's.
    if (is_service(f.ip_proto, f.dst_port)) return ipv4_source_ok(f.src_ip, in) ? FastKind::service : FastKind::none;
    return FastKind::flow;
}

[[gnu::always_inline]] inline const Neighbour* Dataplane::send_ipv4_memo(rte_mbuf* m, uint16_t out, uint32_t next_hop,
                                                                           uint16_t* memo) {
    const Neighbour* const n = memo != nullptr && !standby_ ? neigh_.recall(*memo, out, next_hop, now_ms_) : nullptr;
    if (n == nullptr) [[unlikely]] {
        send_ipv4(m, out, next_hop, memo);
        return nullptr;
    }
    queue_to(m, out, *n);
    return n;
}

[[gnu::always_inline]] inline void Dataplane::queue_to(rte_mbuf* m, uint16_t out, const Neighbour& n) {
    Port& port = ports_[out];
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    std::memcpy(&eth->dst_addr, n.mac.data(), RTE_ETHER_ADDR_LEN);
    eth->src_addr = port.cfg.mac;
    enqueue(port, m);
}

[[gnu::always_inline]] inline void Dataplane::enqueue(Port& port, rte_mbuf* m) {
    if (port.tx_len == kTxQueueLen) [[unlikely]]
        flush();
    port.tx[port.tx_len++] = m;
}

void Dataplane::handle_burst(rte_mbuf** pkts, uint16_t n, uint16_t in) {
    if (standby_) [[unlikely]] {
        // A standby takes nothing but ARP: every packet to handle(), which counts the rest.
        uint64_t bytes = 0;
        for (uint16_t j = 0; j < n; ++j) bytes += rte_pktmbuf_pkt_len(pkts[j]);
        ports_[in].counters.rx_packets.add(n);
        ports_[in].counters.rx_bytes.add(bytes);
        for (uint16_t j = 0; j < n; ++j) handle(pkts[j], in);
        return;
    }
    // Each packet takes one of four lanes, told in the first pass and kept in its FastPacket's
    // spare byte: the established-flow path (parse_fast's shape, addressed to this port's MAC,
    // nothing the checks before the NAT would stop), a resolve request answer_hit_in_place() may
    // answer, another service datagram, or the full parse. One array of them (lane[j].f and its
    // word side by side), so the passes walk one index and keep one base in a register.
    enum : uint8_t { kLaneFast, kLaneHit, kLaneService, kLaneFull };
    struct Lane {
        FastPacket f;  // f.pad: the lane
        // fast, full: the flow's hash, then prefetch_session()'s hint (Nat::kNoFlowHash for a full
        // one's packet that is no flow); hit: the request's target; service: kNoFlowHash.
        uint64_t word;
        // hit: the target's cache bucket, then the entry it held (the second pass reads it), so
        // the answer walks from there without looking the bucket up again.
        union {
            const ResolveCache::Bucket* bucket;
            const CacheEntry* first;
        };
    };
    Lane lane[kRxBurst];
    // Left unwritten (not value-initialised, 4.5 KB for a whole burst) until parse() fills one in.
    alignas(ParsedPacket) unsigned char parsed_space[kRxBurst * sizeof(ParsedPacket)];
    ParsedPacket* const p = reinterpret_cast<ParsedPacket*>(parsed_space);
    DropReason parsed[kRxBurst];  // a full lane's
    uint64_t bytes = 0;
    constexpr uint32_t kTargetAt = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + sizeof(MsgHeader);
    constexpr uint32_t kRequestEnd = kTargetAt + sizeof(ResolveBody);
    // What answer_hit_in_place() asks of the port: answers here, and at this address. (Locals: the
    // packet stores below may alias any member, so a member would be loaded again for every packet.)
    const bool in_place = checks_[in].answers_in_place;
    const uint32_t in_addr = addrs_[in];
    // Where a target's cache bucket is (a port that answers in place has a resolver).
    const ResolveCache::Locator cache_at = in_place ? resolver_->cache_locator() : ResolveCache::Locator{};
    for (int j = 0; j < kPrefetchAhead && j < n; ++j) rte_prefetch0(rte_pktmbuf_mtod(pkts[j], void*));
    for (uint16_t j = 0; j < n; ++j) {
        if (j + kPrefetchAhead < n) rte_prefetch0(rte_pktmbuf_mtod(pkts[j + kPrefetchAhead], void*));
        rte_mbuf* const m = pkts[j];
        Lane& l = lane[j];
        bytes += rte_pktmbuf_pkt_len(m);
        const FastKind kind = fast_candidate(m, in, l.f);
        if (kind == FastKind::flow) {
            l.f.pad = kLaneFast;
            l.word = nat_.prefetch(Nat::key_of(l.f));
            continue;
        }
        if (kind == FastKind::service) {  // the resolution service's or RoCE's: no flow, no second parse (below)
            // Perhaps a resolve request to answer in place (a UDP datagram to this port's own
            // address and the resolution port, long enough to hold a request): the cache bucket of
            // its target on its way, its entry in the next pass. (Target 0, a bad request, too:
            // Resolver::request_hit() refuses it, and the general path answers it. Told apart
            // here, by a branch or without, it cost 2-4% of the hits' rate in paired turns.)
            if (in_place && l.f.dst_port == resolve_port_be_ && l.f.ip_proto == kIpProtoUdp && l.f.dst_ip == in_addr &&
                rte_pktmbuf_data_len(m) >= kRequestEnd) {
                l.f.pad = kLaneHit;
                l.word = load_be64(rte_pktmbuf_mtod_offset(m, const uint8_t*, kTargetAt));
                l.bucket = cache_at.prefetch_bucket(ProcessId{l.word});
            } else {
                l.f.pad = kLaneService;
                l.word = Nat::kNoFlowHash;
            }
            continue;
        }
        l.f.pad = kLaneFull;
        new (&p[j]) ParsedPacket;
        parsed[j] = parse(m, p[j]);
        const bool flow = parsed[j] == DropReason::none && p[j].ether_type_host == kEtherTypeIpv4 && !p[j].fragment &&
                          (p[j].ip_proto == kIpProtoTcp || p[j].ip_proto == kIpProtoUdp) &&
                          !is_service(p[j].ip_proto, p[j].dst_port);
        l.word = flow ? nat_.prefetch(p[j]) : Nat::kNoFlowHash;
    }
    // Counted once per burst, by the worker that took them off the port.
    ports_[in].counters.rx_packets.add(n);
    ports_[in].counters.rx_bytes.add(bytes);
    {  // the prefetcher holds while no slot changes: for this pass alone
        const SessionTable::SessionPrefetcher prefetch_session = nat_.session_prefetcher();
        // One loop for each of the index's searches (SessionTable::first_stop), chosen once a burst.
        const auto pass = [&]<bool kWindow>(std::bool_constant<kWindow>) {
            for (uint16_t j = 0; j < n; ++j) {
                Lane& l = lane[j];
                if (l.f.pad == kLaneHit)
                    l.first = Resolver::prefetch_entry(l.bucket);
                else if (l.word != Nat::kNoFlowHash)  // a flow's packet, on the established-flow path or not
                    l.word = prefetch_session.prefetch<kWindow>(static_cast<uint32_t>(l.word));
            }
        };
        if (prefetch_session.windowed())
            pass(std::true_type{});
        else
            pass(std::false_type{});
    }
    uint32_t established = 0;
    // The next hop the last established flow's packet went to, as recall() vouched for it: a packet
    // to the same (memo, port, address) next takes its MACs without asking again (a burst's flows
    // mostly share one next hop: the peer gateway, or a node). Only the general path changes the
    // neighbour table (learns, probes, inserts), and every packet that takes it forgets the hop;
    // the clock recall() compares with stands still for the burst.
    const Neighbour* hop = nullptr;
    uint64_t hop_word = 0;  // NatRewrite::hop_word() of the packet that set `hop`
    // hop's frame head: its MAC and the port's, written by two stores.
    Port* hop_port = nullptr;
    FrameHead hop_l2;
    uint32_t hits_in_place = 0;  // answer_hit_in_place()'s, counted once for the burst
    // The poll's clock, a local: the rewrite's stores may alias any member, so now_ms_ would be
    // loaded again for every packet. (handle() and answer_hit_in_place() read the member.)
    const uint64_t now = now_ms_;
    for (uint16_t j = 0; j < n; ++j) {
        rte_mbuf* const m = pkts[j];
        const Lane& l = lane[j];
        if (l.f.pad != kLaneFast) {
            hop = nullptr;
            if (l.f.pad == kLaneFull) {
                handle(m, in, p[j], parsed[j], l.word);
                continue;
            }
            if (l.f.pad == kLaneHit && answer_hit_in_place(m, l.f, ProcessId{l.word}, l.first)) {
                ++hits_in_place;
                continue;
            }
            new (&p[j]) ParsedPacket(parsed_of_fast(rte_pktmbuf_mtod(m, const uint8_t*), l.f));
            handle(m, in, p[j], DropReason::none, Nat::kNoFlowHash);
            continue;
        }
        // The frame's start read once: the rewrite's stores below may alias the mbuf's fields, so
        // GCC would read them again for the MACs.
        uint8_t* const eth = rte_pktmbuf_mtod(m, uint8_t*);
        NatRewrite* const rw = nat_.forward_established(eth + sizeof(rte_ether_hdr), l.f, in, now, l.word);
        if (rw != nullptr) {
            ++established;
            const uint64_t word = rw->hop_word();
            if (hop == nullptr || word != hop_word) {
                hop = neigh_.recall(rw->neigh, rw->out_port, rw->next_hop, now);
                if (hop == nullptr) [[unlikely]] {  // no memo yet, or it no longer holds: look it up
                    send_ipv4(m, rw->out_port, rw->next_hop, &rw->neigh);
                    continue;
                }
                hop_word = word;
                hop_port = &ports_[rw->out_port];
                hop_l2 = FrameHead::of(*hop, hop_port->cfg.mac);
            }
            hop_l2.write(eth);
            enqueue(*hop_port, m);
            continue;
        }
        // Not a session's plain packet (a new flow, a FIN, another worker's, ...): the full path.
        hop = nullptr;
        ParsedPacket full;
        const DropReason r = parse(m, full);
        handle(m, in, full, r, l.word);
    }
    nat_.count_established(established);
    if (hits_in_place != 0) {  // as handle_resolve(), Resolver::request() and reply_hit() count each
        resolve_counters_.client_msgs.add(hits_in_place);
        resolver_->count_hits(hits_in_place);
        resolve_counters_.replies_sent.add(hits_in_place);
        resolve_counters_.hits_in_place.add(hits_in_place);
    }
}

RxChecksum Dataplane::rx_ip_checksum(const rte_mbuf* m) {
    // A port that checks IPv4 header checksums says so in the mbuf: trust it, else sum in software.
    const uint64_t verdict = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
    // No verdict (most software ports) told by one test first, so that parse_fast(), inlined, goes
    // straight to its sum instead of telling the three verdicts apart again.
    if (verdict == RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN) return RxChecksum::unknown;
    switch (verdict) {
    case RTE_MBUF_F_RX_IP_CKSUM_GOOD:
    case RTE_MBUF_F_RX_IP_CKSUM_NONE: return RxChecksum::good;  // NONE: the header was checked
    case RTE_MBUF_F_RX_IP_CKSUM_BAD: return RxChecksum::bad;
    default: return RxChecksum::unknown;
    }
}

DropReason Dataplane::parse(const rte_mbuf* m, ParsedPacket& p) {
    return parse_packet(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m), p, rx_ip_checksum(m));
}

void Dataplane::handle(rte_mbuf* m, uint16_t in) {
    ParsedPacket p;
    const DropReason r = parse(m, p);
    handle(m, in, p, r, Nat::kNoFlowHash);
}

void Dataplane::handle(rte_mbuf* m, uint16_t in, const ParsedPacket& p, DropReason parsed, uint64_t flow_hash) {
    if (parsed != DropReason::none) return drop(m, in, parsed);

    // parse_packet() took the whole 14-byte Ethernet header at least.
    const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
    if (!l2_for_us(frame, in)) return drop(m, in, DropReason::l2_not_for_us);
    if (!l2_source_ok(frame)) return drop(m, in, DropReason::l2_bad_source);
    if (p.vlan_count != 0) return drop(m, in, DropReason::vlan_unsupported);
    // A standby member learns neighbours from ARP (warm for a takeover) and takes nothing else.
    if (standby_ && p.ether_type_host != kEtherTypeArp) return drop(m, in, DropReason::cluster_standby);

    switch (p.ether_type_host) {
    case kEtherTypeArp: return handle_arp(m, in, p);
    case kEtherTypeIpv4: return handle_ipv4(m, in, p, flow_hash);
    default: return drop(m, in, DropReason::ethertype_unsupported);
    }
}

void Dataplane::handle_arp(rte_mbuf* m, uint16_t in, const ParsedPacket& p) {
    Port& port = ports_[in];
    auto* arp = at<rte_arp_hdr>(m, p.l3_offset);
    const bool request = p.arp_op_host == RTE_ARP_OP_REQUEST;
    (request ? counters_.arp_requests_received : counters_.arp_replies_received).add();

    const uint32_t sip = arp->arp_data.arp_sip;
    const bool sender_ok = rte_is_unicast_ether_addr(&arp->arp_data.arp_sha) &&
                           !rte_is_zero_ether_addr(&arp->arp_data.arp_sha) && sip != port.cfg.addr &&
                           ((sip ^ port.cfg.addr) & port.mask) == 0;
    const bool for_us = arp->arp_data.arp_tip == port.cfg.addr;

    if (sender_ok) {
        learn_from_arp(in, *arp, for_us);
        // Every worker keeps its own neighbour table: the others learn from a copy.
        if (hand_out_ && !from_hand_off_)
            for (uint16_t w = 0; w < worker_.count; ++w) {
                if (w == worker_.index) continue;
                rte_mbuf* c = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
                if (c == nullptr) {  // not a drop: the packet itself goes on; that worker learns later
                    counters_.arp_copies_failed.add();
                    continue;
                }
                counters_.arp_copies_sent.add();
                hand_off(c, in, w, kHandOffArpCopy);
            }
    }
    if (!for_us) return drop(m, in, DropReason::arp_not_for_us);
    // An ARP probe (sender 0.0.0.0) for our address still gets an answer: that is how duplicate
    // address detection learns the address is taken.
    if (!sender_ok && sip != 0) return drop(m, in, DropReason::arp_bad_sender);
    if (!request) {
        rte_pktmbuf_free(m);
        return;
    }
    if (standby_) return drop(m, in, DropReason::cluster_standby);  // the active member answers

    auto* eth = at<rte_ether_hdr>(m, 0);
    eth->dst_addr = eth->src_addr;
    eth->src_addr = port.cfg.mac;
    arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REPLY);
    arp->arp_data.arp_tha = arp->arp_data.arp_sha;
    arp->arp_data.arp_tip = sip;
    arp->arp_data.arp_sha = port.cfg.mac;
    arp->arp_data.arp_sip = port.cfg.addr;
    counters_.arp_replies_sent.add();
    tx(m, in);
}

// Learn the sender when the ARP is for us; otherwise only refresh one we already know (Linux does
// the same), so a chatty segment cannot fill the table.
void Dataplane::learn_from_arp(uint16_t in, const rte_arp_hdr& arp, bool for_us) {
    Neighbour* n = neigh_.learn(in, arp.arp_data.arp_sip, to_mac(arp.arp_data.arp_sha), now_ms_, for_us);
    if (n == nullptr) return;
    counters_.neigh_learned.add();
    if (rte_mbuf* held = n->held; held != nullptr) {
        n->held = nullptr;
        tx_to(held, in, arp.arp_data.arp_sha);
    }
}

// ---------------------------------------------------------------------------------------------
// Workers: which one a packet belongs to, and the hand-off rings between them.

uint16_t Dataplane::owner_of(const uint8_t* frame, uint16_t in, const ParsedPacket& p) const {
    const uint16_t me = worker_.index, count = worker_.count;
    if (count == 1) return me;
    const auto port_owner = [&](uint16_t port_be) -> int {
        // Not rte_be_to_cpu_16: on a variable DPDK swaps with an xchg of byte registers (slow).
        const uint16_t port = RTE_BYTE_ORDER == RTE_LITTLE_ENDIAN ? __builtin_bswap16(port_be) : port_be;
        return port >= nat_lo_ && port <= nat_hi_ ? port % count : -1;
    };
    if (p.ip_proto == kIpProtoIcmp) {
        // An error about a session's packet: the session port is the quoted packet's source port.
        if (p.icmp_type != kIcmpUnreachable && p.icmp_type != kIcmpTimeExceeded && p.icmp_type != kIcmpParamProblem)
            return me;
        const uint32_t quoted = p.l4_offset + 8u;
        if (p.l4_len < 8u + 20u + 4u) return me;
        const uint8_t* q = frame + quoted;
        const uint32_t ihl = (q[0] & 0x0fu) * 4u;
        if ((q[9] != kIpProtoTcp && q[9] != kIpProtoUdp) || p.l4_len < 8u + ihl + 4u) return me;
        uint16_t sport_be;
        std::memcpy(&sport_be, q + ihl, 2);
        const int w = port_owner(sport_be);
        return w < 0 ? me : static_cast<uint16_t>(w);
    }
    if (p.ip_proto != kIpProtoTcp && p.ip_proto != kIpProtoUdp) return me;
    if (p.ip_proto == kIpProtoUdp && p.dst_port == resolve_port_be_ && resolve_port_be_ != 0) {
        // A peer's answer goes to the worker whose query it is (the query ID's top byte).
        if (p.payload_len >= sizeof(MsgHeader) + sizeof(AnswerBody)) {
            MsgHeader h;
            std::memcpy(&h, frame + p.payload_offset, sizeof h);
            if (h.type == static_cast<uint8_t>(MsgType::answer)) {
                const uint8_t* qid = frame + p.payload_offset + sizeof h + offsetof(AnswerBody, query_id);
                return qid[0] < count ? qid[0] : me;  // big-endian: byte 0 is the top byte
            }
        }
    } else if (const int w = port_owner(p.dst_port); w >= 0 && p.dst_port != roce_port_be_) {
        return static_cast<uint16_t>(w);
    }
    // A flow: the device's hash put it on our queue, or ours decides.
    if (ports_[in].cfg.rss) return me;
    uint32_t h = rte_hash_crc_4byte(p.src_ip, 0);
    h = rte_hash_crc_4byte(p.dst_ip, h);
    h = rte_hash_crc_4byte(static_cast<uint32_t>(p.src_port) << 16 | p.dst_port, h);
    h = rte_hash_crc_4byte(p.ip_proto, h);
    return static_cast<uint16_t>(h % count);
}

void Dataplane::hand_off(rte_mbuf* m, uint16_t in, uint16_t to, uint8_t kind) {
    m->hash.usr = static_cast<uint32_t>(kind) << 16 | in;
    HandOffBuf& b = hand_out_[to];
    b.pkts[b.len++] = m;
    if (b.len == kBurst) flush_hand_offs();
}

void Dataplane::flush_hand_offs() {
    for (uint16_t w = 0; w < worker_.count; ++w) {
        HandOffBuf& b = hand_out_[w];
        if (b.len == 0) continue;
        const unsigned n = rte_ring_mp_enqueue_burst(worker_.handoff[w], reinterpret_cast<void**>(b.pkts), b.len, nullptr);
        counters_.handoffs_sent.add(n);
        if (n != 0 && w < worker_.bells.size() && worker_.bells[w] != nullptr) worker_.bells[w]->ring();
        for (unsigned j = n; j < b.len; ++j) drop(b.pkts[j], static_cast<uint16_t>(b.pkts[j]->hash.usr & 0xffff),
                                                 DropReason::handoff_ring_full);
        b.len = 0;
    }
}

void Dataplane::take_hand_offs(uint32_t* handled) {
    rte_mbuf* pkts[kBurst];
    const unsigned n =
        rte_ring_sc_dequeue_burst(worker_.handoff[worker_.index], reinterpret_cast<void**>(pkts), kBurst, nullptr);
    if (n == 0) return;
    counters_.handoffs_received.add(n);
    from_hand_off_ = true;
    for (unsigned j = 0; j < n; ++j) {
        rte_mbuf* m = pkts[j];
        const uint16_t in = static_cast<uint16_t>(m->hash.usr & 0xffff);
        if (in >= nports_) {
            rte_pktmbuf_free(m);
            continue;
        }
        if ((m->hash.usr >> 16) == kHandOffArpCopy) {
            ParsedPacket p;
            if (parse_packet(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m), p) == DropReason::none &&
                p.ether_type_host == kEtherTypeArp) {
                const auto* arp = at<rte_arp_hdr>(m, p.l3_offset);
                learn_from_arp(in, *arp, arp->arp_data.arp_tip == ports_[in].cfg.addr);
            }
            rte_pktmbuf_free(m);
            continue;
        }
        handle(m, in);
    }
    from_hand_off_ = false;
    *handled += n;
}

void Dataplane::handle_ipv4(rte_mbuf* m, uint16_t in, const ParsedPacket& p, uint64_t flow_hash) {
    if (!ipv4_source_ok(p.src_ip, in)) return drop(m, in, DropReason::ipv4_bad_source);
    if (p.fragment) return drop(m, in, DropReason::ipv4_fragment);
    const bool to_us = owns_address(p.dst_ip);  // decided once

    // Another worker's packet goes to it; a packet handed to us is ours.
    if (hand_out_ && !from_hand_off_ && to_us) {
        if (const uint16_t w = owner_of(rte_pktmbuf_mtod(m, const uint8_t*), in, p); w != worker_.index)
            return hand_off(m, in, w, kHandOffPacket);
    }

    // The resolution service first: its port is never a mapping's nor a session's (the config keeps
    // it out of both), so the session lookup can be skipped for it.
    if (p.ip_proto == kIpProtoUdp && p.dst_port == resolve_port_be_ && resolver_ != nullptr && to_us)
        return handle_resolve(m, in, p);

    // RoCE v2 to the arrival port's own address: a connection's translation, or a counted drop.
    if (p.ip_proto == kIpProtoUdp && p.dst_port == roce_port_be_ && p.dst_ip == addrs_[in])
        return handle_roce(m, in, p);

    // The port-map proxy: packets of a session, or opening one through an import/export rule.
    if (p.ip_proto == kIpProtoTcp || p.ip_proto == kIpProtoUdp) {
        if (act(m, in, nat_.handle(rte_pktmbuf_mtod_offset(m, uint8_t*, p.l3_offset), p, in, now_ms_, flow_hash)))
            return;
    }

    // Weak host model for the gateway's own addresses: a node may ping the external address too.
    if (to_us) {
        switch (p.ip_proto) {
        case kIpProtoIcmp: return handle_local_icmp(m, in, p);
        case kIpProtoTcp:
        case kIpProtoUdp: return drop(m, in, DropReason::l4_unhandled);
        default: return drop(m, in, DropReason::ipv4_proto_unhandled);
        }
    }
    return drop(m, in, DropReason::ipv4_not_for_us);
}

void Dataplane::handle_local_icmp(rte_mbuf* m, uint16_t in, const ParsedPacket& p) {
    auto* icmp = at<rte_icmp_hdr>(m, p.l4_offset);
    if (rte_raw_cksum(icmp, p.l4_len) != 0xffff) return drop(m, in, DropReason::icmp_bad_checksum);

    // Errors about packets of a port-map session go back to whoever sent the original.
    if (p.icmp_type == kIcmpUnreachable || p.icmp_type == kIcmpTimeExceeded || p.icmp_type == kIcmpParamProblem) {
        if (act(m, in, nat_.handle_icmp_error(rte_pktmbuf_mtod_offset(m, uint8_t*, p.l3_offset), p))) return;
    }

    if (p.icmp_type == RTE_IP_ICMP_ECHO_REPLY && p.icmp_code == 0) {
        // An answer to a ping the control threads sent.
        return punt(m, in, nullptr);
    }
    if (p.icmp_type != RTE_IP_ICMP_ECHO_REQUEST || p.icmp_code != 0) return drop(m, in, DropReason::icmp_unhandled);
    counters_.echo_requests_received.add();

    // Turn the request around in place: same port, back to the sender's MAC.
    auto* eth = at<rte_ether_hdr>(m, 0);
    eth->dst_addr = eth->src_addr;
    eth->src_addr = ports_[in].cfg.mac;
    auto* ip = at<rte_ipv4_hdr>(m, p.l3_offset);
    ip->dst_addr = p.src_ip;
    ip->src_addr = p.dst_ip;
    ip->time_to_live = kDefaultTtl;
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    // Only the type changes (8 -> 0): adjust the checksum for that one word instead of summing again.
    uint16_t type_code_old, type_code_new;
    std::memcpy(&type_code_old, icmp, 2);
    icmp->icmp_type = RTE_IP_ICMP_ECHO_REPLY;
    std::memcpy(&type_code_new, icmp, 2);
    icmp->icmp_cksum = checksum_adjust(icmp->icmp_cksum, type_code_old, type_code_new);
    // Drop Ethernet padding so the reply is exactly as long as its IPv4 packet says.
    rte_pktmbuf_trim(m, rte_pktmbuf_pkt_len(m) - (p.l3_offset + p.l3_len));
    counters_.echo_replies_sent.add();
    tx(m, in);
}

// ---------------------------------------------------------------------------------------------
// Sending: routes, neighbours, TX queues.

int Dataplane::route(const std::vector<DpPortConfig>& ports, uint32_t dst, uint32_t* next_hop) {
    for (std::size_t i = 0; i < ports.size(); ++i) {
        if (((dst ^ ports[i].addr) & prefix_mask(ports[i].prefix_len)) == 0) {
            *next_hop = dst;
            return static_cast<int>(i);
        }
    }
    for (std::size_t i = 0; i < ports.size(); ++i) {
        if (ports[i].next_hop != 0) {
            *next_hop = ports[i].next_hop;
            return static_cast<int>(i);
        }
    }
    return -1;
}

void Dataplane::handle_inject(rte_mbuf* m) {
    // The control threads hand over a bare IPv4 packet; give it an Ethernet header and check it as
    // if it had arrived, so a bug upstream cannot put garbage on the wire.
    ParsedPacket p;
    if (rte_pktmbuf_prepend(m, sizeof(rte_ether_hdr)) == nullptr) return drop(m, 0, DropReason::inject_malformed);
    auto* eth = at<rte_ether_hdr>(m, 0);
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    if (parse_packet(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m), p) != DropReason::none ||
        p.ether_type_host != kEtherTypeIpv4)
        return drop(m, 0, DropReason::inject_malformed);

    uint32_t nh = 0;
    const int out = route(port_cfgs_, p.dst_ip, &nh);
    if (out < 0) return drop(m, 0, DropReason::no_route);
    send_ipv4(m, static_cast<uint16_t>(out), nh);
}

void Dataplane::send_ipv4(rte_mbuf* m, uint16_t out, uint32_t next_hop, uint16_t* memo) {
    if (memo != nullptr) {
        if (const Neighbour* n = neigh_.recall(*memo, out, next_hop, now_ms_); n != nullptr) return tx_to(m, out, from_mac(n->mac));
    }
    const NeighbourTable::Lookup l = neigh_.lookup(out, next_hop, now_ms_);
    switch (l.verdict) {
    case NeighbourTable::Verdict::full: return drop(m, out, DropReason::neighbour_table_full);
    case NeighbourTable::Verdict::probe:
        l.entry->held = m;
        return send_arp_request(out, next_hop);
    case NeighbourTable::Verdict::pending:
        if (l.entry->held != nullptr) return drop(m, out, DropReason::neighbour_unresolved);
        l.entry->held = m;
        return;
    case NeighbourTable::Verdict::resolved_probe: send_arp_request(out, next_hop); [[fallthrough]];
    case NeighbourTable::Verdict::resolved: {
        if (memo != nullptr) *memo = neigh_.memo_of(l.entry);  // recall() decides whether it serves
        return tx_to(m, out, from_mac(l.entry->mac));
    }
    }
}

void Dataplane::follow_role() {
    const bool standby = standby_src_->load(std::memory_order_acquire);
    if (standby != standby_) {
        standby_ = standby;
        // One worker speaks for the ports (they are the same for all); three rounds, in case one is lost.
        garp_left_ = !standby && worker_.index == 0 ? 3 : 0;
        garp_next_ms_ = now_ms_;
    }
    if (garp_left_ == 0 || now_ms_ < garp_next_ms_) return;
    for (uint16_t i = 0; i < nports_; ++i) send_gratuitous_arp(i);
    --garp_left_;
    garp_next_ms_ = now_ms_ + (garp_left_ == 2 ? 500 : 1500);
}

void Dataplane::send_gratuitous_arp(uint16_t out) {
    // A request for our own address from our own address (RFC 5227's announcement): every
    // neighbour that knows the address takes the new MAC; nobody answers it.
    send_arp_request(out, ports_[out].cfg.addr);
    counters_.arp_gratuitous_sent.add();
}

void Dataplane::send_arp_request(uint16_t out, uint32_t target_ip) {
    if (standby_) return;  // a standby's probe would point neighbours at it; the active member asks
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) return;  // the probe timer sends another
    const Port& port = ports_[out];
    auto* eth = reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_append(m, sizeof(rte_ether_hdr) + sizeof(rte_arp_hdr)));
    std::memset(&eth->dst_addr, 0xff, sizeof eth->dst_addr);
    eth->src_addr = port.cfg.mac;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
    auto* arp = reinterpret_cast<rte_arp_hdr*>(eth + 1);
    arp->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
    arp->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    arp->arp_hlen = RTE_ETHER_ADDR_LEN;
    arp->arp_plen = 4;
    arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REQUEST);
    arp->arp_data.arp_sha = port.cfg.mac;
    arp->arp_data.arp_sip = port.cfg.addr;
    std::memset(&arp->arp_data.arp_tha, 0, sizeof arp->arp_data.arp_tha);
    arp->arp_data.arp_tip = target_ip;
    counters_.arp_requests_sent.add();
    tx(m, out);
}

void Dataplane::tx_to(rte_mbuf* m, uint16_t out, const rte_ether_addr& dst) {
    auto* eth = at<rte_ether_hdr>(m, 0);
    eth->dst_addr = dst;
    eth->src_addr = ports_[out].cfg.mac;
    tx(m, out);
}

void Dataplane::tx(rte_mbuf* m, uint16_t out) {
    Port& port = ports_[out];
    // The active member owns the addresses: a standby's ARP reply or probe would point neighbours at it.
    if (standby_) [[unlikely]]
        return drop(m, out, DropReason::cluster_standby);
    enqueue(port, m);
}

void Dataplane::flush() {
    for (std::size_t i = 0; i < nports_; ++i) {
        Port& port = ports_[i];
        if (port.tx_len == 0) continue;
        uint64_t bytes = 0;
        for (uint16_t j = 0; j < port.tx_len; ++j) bytes += rte_pktmbuf_pkt_len(port.tx[j]);
        const uint16_t sent = rte_eth_tx_burst(port.cfg.port_id, queue_, port.tx, port.tx_len);
        for (uint16_t j = sent; j < port.tx_len; ++j) {
            bytes -= rte_pktmbuf_pkt_len(port.tx[j]);
            port.counters.drop(DropReason::tx_full);
            rte_pktmbuf_free(port.tx[j]);
        }
        port.counters.tx_packets.add(sent);
        port.counters.tx_bytes.add(bytes);
        port.tx_len = 0;
    }
}

bool Dataplane::act(rte_mbuf* m, uint16_t in, const Nat::Verdict& v) {
    switch (v.kind) {
    case Nat::Verdict::Kind::forward: send_ipv4(m, v.out_port, v.next_hop, v.neigh); return true;
    case Nat::Verdict::Kind::drop: drop(m, in, v.reason); return true;
    case Nat::Verdict::Kind::not_nat: return false;
    }
    return false;
}

void Dataplane::answer(DpRequest& r) {
    switch (r.kind) {
    case DpRequest::Kind::resolve:
        if (resolver_ == nullptr) {
            r.status = ResolveStatus::unreachable;
            break;
        }
        // reply() completes it, now or when the query finishes.
        return resolver_->request(Requester{0, 0, 0, 0, &r}, r.target, now_ms_);
    case DpRequest::Kind::set_peers:
        // Swapped, not copied: the lcore allocates nothing, and the old table goes back to be freed.
        carry_over_replay_windows(peers_, r.peers);
        std::swap(peers_, r.peers);
        if (resolver_ != nullptr) resolver_->set_peers(r.peer_parties);
        break;
    case DpRequest::Kind::session_dump:
    {
        r.sessions.clear();
        const std::size_t room = std::min<std::size_t>(r.limit, r.sessions.capacity());
        if (room == 0) {
            r.next = r.from;
        } else {
            r.next = nat_.sessions().visit(r.from, [&](const Session& s, const SessionCold& c) {
                r.sessions.emplace_back(s, c);
                return r.sessions.size() < room;  // false once full: the next page starts after it
            });
        }
        r.total = nat_.session_count();
    }
        break;
    }
    r.now_ms = now_ms_;
    r.done.store(true, std::memory_order_release);
}

void Dataplane::drop(rte_mbuf* m, uint16_t port, DropReason r) {
    ports_[port].counters.drop(r);
    rte_pktmbuf_free(m);
}

void Dataplane::housekeeping(bool busy) {
    // Bounded per poll while traffic flows, so no poll stalls for a sweep; all at once when idle.
    const uint32_t slice = busy ? kHousekeepingSlice : UINT32_MAX;

    // Neighbour timers: a pass over the table every kTickMs, a slice of it per poll.
    if (neigh_cursor_ == kNoPass && now_ms_ >= next_tick_ms_) {
        neigh_cursor_ = 0;
        next_tick_ms_ = now_ms_ + kTickMs;
        if (resolver_ != nullptr) resolver_->expire(now_ms_);
    }
    if (neigh_cursor_ != kNoPass) {
        neigh_cursor_ = neigh_.tick_slots(
            now_ms_, neigh_cursor_, slice, [this](Neighbour& n) { send_arp_request(n.port, n.ip); },
            [this](Neighbour& n, bool failed) {
                (failed ? counters_.neigh_failed : counters_.neigh_expired).add();
                if (n.held != nullptr) drop(n.held, n.port, DropReason::neighbour_unresolved);
                n.held = nullptr;
            });
        if (neigh_cursor_ >= neigh_.slot_count()) {
            neigh_cursor_ = kNoPass;
            publish_gauges();
        }
    }

    // Sessions: the whole table about once a second, as credit earned by the clock.
    if (now_ms_ != sweep_ms_) {
        const uint64_t cap = nat_.sessions().capacity();
        sweep_credit_ = std::min(cap, sweep_credit_ + cap * (now_ms_ - sweep_ms_) / 1000 + 1);
        sweep_ms_ = now_ms_;
    }
    if (sweep_credit_ != 0) {
        const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(sweep_credit_, slice));
        nat_.expire(now_ms_, n);
        sweep_credit_ -= n;
    }
}

void Dataplane::publish_gauges() {
    sessions_gauge_.store(nat_.session_count(), std::memory_order_relaxed);
    for (int pool = 0; pool < 2; ++pool)
        for (std::size_t proto = 0; proto < kL4Protos; ++proto)
            pool_free_[pool][proto].store(nat_.pool(static_cast<Nat::Pool>(pool), static_cast<L4Proto>(proto)).free_count(),
                                          std::memory_order_relaxed);
    neigh_entries_.store(neigh_.size(), std::memory_order_relaxed);
    for (std::size_t i = 0; i < nports_; ++i)
        ports_[i].neigh_entries.store(neigh_.count_port(static_cast<uint16_t>(i)), std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// The resolution service: client requests on internal ports, peer messages on the external port.

template <uint16_t kFixedLen>
[[gnu::always_inline]] inline Dataplane::UdpChecksum Dataplane::udp_checksum(const rte_mbuf* m, const rte_ipv4_hdr* ip,
                                                                             const rte_udp_hdr* udp, uint16_t l4_len) {
    if (udp->dgram_cksum == 0) return UdpChecksum::vouched;  // none sent
    const uint64_t verdict = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
    if (verdict == RTE_MBUF_F_RX_L4_CKSUM_BAD) return UdpChecksum::bad;
    if (verdict == RTE_MBUF_F_RX_L4_CKSUM_GOOD || verdict == RTE_MBUF_F_RX_L4_CKSUM_NONE) return UdpChecksum::vouched;
    // Pseudo-header plus the segment, checksum included, sums to all ones when it is right.
    const auto* const d = reinterpret_cast<const uint8_t*>(udp);
    uint64_t sum;
    if constexpr (kFixedLen != 0) {
        // The header's addresses (its last 8 bytes) and the datagram right after them (a 20-byte
        // header, the caller's shape: `udp` right after `ip`) as one span, so the pseudo-header's
        // addresses are summed in the chain; its protocol and length, fixed, are a constant.
        // (Summed apart from the addresses' values, the pseudo-header took 11 instructions of a
        // cache hit, on the chain the branch below waits for; without this check at all, hits
        // ran 6% faster.) The constant is below 2^17: added to a one's-complement sum modulo
        // 2^64 - 1 as an integer it can carry out only from a sum within 2^17 of all ones, and
        // then the carry's loss is 2^64 = 1 modulo that: added back.
        static_assert(offsetof(rte_ipv4_hdr, src_addr) + 8 == sizeof(rte_ipv4_hdr));
        const uint64_t body = raw_sum_fixed<8 + kFixedLen>(reinterpret_cast<const uint8_t*>(&ip->src_addr));
        constexpr uint32_t kFixedPart = uint32_t{stored16(kIpProtoUdp)} + stored16(kFixedLen);
        sum = body + kFixedPart;
        sum += sum < body;
    } else {
        sum = uint64_t{pseudo_header_sum(ip->src_addr, ip->dst_addr, kIpProtoUdp, l4_len)} + raw_sum(d, l4_len);
    }
    return sums_to_ones(sum) ? UdpChecksum::summed : UdpChecksum::bad;
}

[[gnu::always_inline]] inline bool Dataplane::answer_hit_in_place(rte_mbuf* m, const FastPacket& f, ProcessId target,
                                                                        const CacheEntry* first) {
    constexpr uint32_t kL4 = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr), kMsg = kL4 + sizeof(rte_udp_hdr);
    constexpr uint16_t kRequestIpLen = sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + sizeof(MsgHeader) + sizeof(ResolveBody);
    constexpr uint16_t kReplyBody = sizeof(ResolveReplyBody), kReplyFrame = kMsg + sizeof(MsgHeader) + kReplyBody;
    // The reply goes where the request is: one direct segment of its own, at the offset a reset
    // leaves (so the reset keeps the request's bytes where they are: the headroom, the buffer
    // being longer), with room for the reply. The data offset, reference count and segment count
    // lie side by side (DPDK's rearm_data, with the port after them): compared as one word.
    static_assert(offsetof(rte_mbuf, refcnt) == offsetof(rte_mbuf, data_off) + 2 &&
                  offsetof(rte_mbuf, nb_segs) == offsetof(rte_mbuf, data_off) + 4 &&
                  offsetof(rte_mbuf, port) == offsetof(rte_mbuf, data_off) + 6);
    uint64_t rearm;
    std::memcpy(&rearm, &m->data_off, sizeof rearm);
#if RTE_BYTE_ORDER == RTE_LITTLE_ENDIAN
    constexpr uint64_t kAllButPort = 0xffffffffffffull, kAtHeadroomOnceAlone = RTE_PKTMBUF_HEADROOM | 1ull << 16 | 1ull << 32;
#else
    constexpr uint64_t kAllButPort = 0xffffffffffff0000ull, kAtHeadroomOnceAlone = uint64_t{RTE_PKTMBUF_HEADROOM} << 48 | 1ull << 32 | 1ull << 16;
#endif
    if ((rearm & kAllButPort) != kAtHeadroomOnceAlone || !RTE_MBUF_DIRECT(m) || m->buf_len < RTE_PKTMBUF_HEADROOM + kReplyFrame)
        return false;
    uint8_t* const d = rte_pktmbuf_mtod(m, uint8_t*);
    auto* const ip = reinterpret_cast<rte_ipv4_hdr*>(d + sizeof(rte_ether_hdr));
    if (ip->total_length != rte_cpu_to_be_16(kRequestIpLen)) return false;  // parse_fast: UDP's length is the IP's
    // A client's resolve request as parse_message() takes it, with nothing in the fields a client
    // leaves at 0 (party, channel, key ID, reserved); any other header is the general path's.
    uint8_t* const msg = d + kMsg;
    constexpr uint8_t kRequestHead[8] = {kMsgMagic >> 8, kMsgMagic & 0xff, kMsgVersion, static_cast<uint8_t>(MsgType::resolve),
                                         0, 0, 0, sizeof(ResolveBody)};
    if (std::memcmp(msg, kRequestHead, sizeof kRequestHead) != 0 || load_be32(msg + offsetof(MsgHeader, channel)) != 0)
        return false;
    const auto* const udp = reinterpret_cast<const rte_udp_hdr*>(d + kL4);
    const UdpChecksum checked = udp_checksum<kRequestIpLen - sizeof(rte_ipv4_hdr)>(m, ip, udp, kRequestIpLen - sizeof(rte_ipv4_hdr));
    if (checked == UdpChecksum::bad) return false;
    // Summed here just now: the request's checksum field is right, and the reply's follows from it
    // (below). Read before the reply is written over it.
    const uint16_t request_sum = udp->dgram_cksum;
    ReplyRoute& rr = reply_routes_[(f.src_ip * 0x9e3779b1u) >> 24];
    if (rr.ip != f.src_ip) {
        uint32_t nh = 0;
        const int out = route(port_cfgs_, f.src_ip, &nh);
        if (out < 0) return false;
        const DpPortConfig& pc = ports_[out].cfg;
        rr = ReplyRoute{f.src_ip, nh, static_cast<uint16_t>(out), 0, pc.addr,
                        ipv4_header_checksum(halves_sum(pc.addr) + halves_sum(f.src_ip), kReplyFrame - sizeof(rte_ether_hdr)),
                        pc.tx_cksum};
    }
    // Read before the reply's stores, which may alias it.
    const uint32_t src = rr.src;
    const uint16_t reply_ip_sum = rr.ip_sum;
    const bool out_sums = rr.tx_cksum;
    const Resolver::CacheAnswer a = resolver_->request_hit(target, first, now_ms_);
    if (a.entry == nullptr) return false;

    // rte_pktmbuf_reset()'s work, but for what the checks above leave as it is (one direct segment,
    // so no next segment and no EXTERNAL flag, and the data at the headroom); then start_message()'s,
    // on the request: the frame's length, the header's type and body length (magic, version, the
    // request ID and the zeros stay), the body written over the request's.
    m->port = RTE_MBUF_PORT_INVALID;
    m->ol_flags = 0;
    m->packet_type = 0;
    m->pkt_len = kReplyFrame;
    m->data_len = kReplyFrame;
    m->vlan_tci = 0;
    m->vlan_tci_outer = 0;
    m->tx_offload = 0;
    msg[offsetof(MsgHeader, type)] = static_cast<uint8_t>(MsgType::resolve_reply);
    store_be16(msg + offsetof(MsgHeader, body_len), kReplyBody);
    if (checked == UdpChecksum::summed && !out_sums) {
        // The reply's UDP checksum from the request's, as RFC 1624 updates a checksum, over the
        // whole datagram: the reply is the request with the addresses and ports swapped (which
        // leaves a sum as it is), the source our port's address where the request's destination
        // was, the lengths, type and body length below changed, and the body's record (the target
        // moves from offset 0 to 4 of the body, which leaves its sum as it is). Nothing summed but
        // the record's head (write_hit_record), where finish_message() sums every header field.
        constexpr auto minus = [](uint16_t v) { return uint64_t{0xffff} - v; };  // -v, modulo 0xffff
        constexpr auto pair = [](uint8_t first, uint8_t second) { return stored16(static_cast<uint16_t>(first << 8 | second)); };
        constexpr uint16_t kRequestUdpLen = kRequestIpLen - sizeof(rte_ipv4_hdr);
        constexpr uint16_t kReplyUdpLen = kReplyFrame - sizeof(rte_ether_hdr) - sizeof(rte_ipv4_hdr);
        // The UDP length twice (pseudo-header and UDP header), the type beside the version, the body length.
        constexpr uint64_t kChanged = 2 * (uint64_t{stored16(kReplyUdpLen)} + minus(stored16(kRequestUdpLen))) +
                                      pair(kMsgVersion, static_cast<uint8_t>(MsgType::resolve_reply)) +
                                      minus(pair(kMsgVersion, static_cast<uint8_t>(MsgType::resolve))) +
                                      stored16(kReplyBody) + minus(stored16(sizeof(ResolveBody)));
        uint8_t* const body = msg + sizeof(MsgHeader);
        store_be64(reinterpret_cast<ResolveReplyBody*>(body)->target, target.value);
        // The request's sum without its checksum field is minus that field (the whole summed to 0xffff).
        // Every term below 2^20 (the record's sum folded, so write_hit_record's below 2^18), so
        // the whole fits in 32 bits: folded from there (fold_sum's two 32-bit steps were 6
        // instructions a hit).
        static_assert(kChanged < 1u << 20);
        uint16_t udp_sum = static_cast<uint16_t>(~fold_sum32(static_cast<uint32_t>(
            minus(request_sum) + halves_sum(src) + 2 * uint64_t{0xffff} - halves_sum(f.dst_ip) + kChanged +
            write_hit_record(body, a.source, *a.entry))));
        if (udp_sum == 0) udp_sum = 0xffff;  // 0 would mean "no checksum"
        store_udp_ipv4(ip, src, f.src_ip, resolve_port_be_, f.src_port, sizeof(MsgHeader) + kReplyBody, reply_ip_sum, udp_sum);
        if (rr.l2_version != neigh_.version() || now_ms_ >= rr.l2_until) [[unlikely]] {
            reply_l2(m, rr);
            return true;
        }
        rr.l2.write(d);
        enqueue(ports_[rr.out], m);
        return true;
    }
    Header h;
    h.type = MsgType::resolve_reply;
    h.sender_party = 0;
    h.body_len = kReplyBody;
    h.seq = load_be64(msg + offsetof(MsgHeader, seq));
    h.channel = h.key_id = 0;
    OutMessage o(m, msg + sizeof(MsgHeader), ip, h, f.src_ip, rr.nh, f.src_port, rr.out, sizeof(MsgHeader) + kReplyBody,
                 -1, &rr.neigh);
    finish_message(o, write_hit_body(o.body, target, a.source, *a.entry), 0);
    return true;
}

void Dataplane::handle_resolve(rte_mbuf* m, uint16_t in, const ParsedPacket& p) {
    if (udp_checksum(m, at<rte_ipv4_hdr>(m, p.l3_offset), at<rte_udp_hdr>(m, p.l4_offset), p.l4_len) == UdpChecksum::bad)
        return drop(m, in, DropReason::resolve_malformed);
    ParsedMsg msg;
    const std::span<const uint8_t> dgram(rte_pktmbuf_mtod_offset(m, const uint8_t*, p.payload_offset), p.payload_len);
    if (parse_message(dgram, msg) != WireError::ok) return drop(m, in, DropReason::resolve_malformed);

    const bool external = ports_[in].cfg.role == PortRole::external;
    if (is_peer_message(msg.header.type)) {
        if (!external) return drop(m, in, DropReason::resolve_wrong_port);
        return handle_peer_message(m, in, p, msg);
    }
    if (external) return drop(m, in, DropReason::resolve_wrong_port);
    resolve_counters_.client_msgs.add();
    switch (msg.header.type) {
    case MsgType::resolve: {
        ResolveBody b;
        std::memcpy(&b, msg.body.data(), sizeof b);
        const Requester r{p.src_ip, p.src_port, in, msg.header.seq, nullptr};
        // A cache hit answers at once: the reply is built in this request's mbuf, not a new one.
        spare_ = m;
        resolver_->request(r, ProcessId{load_be64(b.target)}, now_ms_);
        if (spare_ != nullptr) rte_pktmbuf_free(std::exchange(spare_, nullptr));
        return;
    }
    case MsgType::reg:
    case MsgType::heartbeat:
    case MsgType::deregister:
        // The directory lives with the control threads; they check and answer.
        return punt(m, in, &resolve_counters_.punted_registrations);
    case MsgType::conn_req:
    case MsgType::conn_rep:
    case MsgType::conn_rtu:
        // Connection handshakes: the control threads check the processes and relay.
        return punt(m, in, &resolve_counters_.punted_handshakes);
    default: return drop(m, in, DropReason::resolve_unexpected);
    }
}

// ---------------------------------------------------------------------------------------------
// RoCE v2: the connection's translation rewrites addresses and DestQP and updates the ICRC.

void Dataplane::handle_roce(rte_mbuf* m, uint16_t in, const ParsedPacket& p) {
    uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
    if (const DropReason r = roce_check(frame, rte_pktmbuf_data_len(m), p); r != DropReason::none) return drop(m, in, r);
    uint8_t* ip = frame + p.l3_offset;
    const uint32_t ip_len = p.l3_len;
    const uint8_t* bth = ip + 28;
    const bool external = ports_[in].cfg.role == PortRole::external;
    RoceEntry* e = shared_.roce->find(external ? RoceSide::external : RoceSide::internal, bth_dqpn(bth));
    if (e == nullptr) return drop(m, in, DropReason::roce_no_translation);
    if (p.src_ip != e->expect_src)
        return drop(m, in, external ? DropReason::roce_not_peer : DropReason::roce_wrong_source);
    if (ip[8] <= 1) return drop(m, in, DropReason::ttl_expired);
    roce_rewrite(ip, ip_len, *e);
    e->packets.add();
    e->bytes.add(ip_len);
    send_ipv4(m, e->out_port, e->next_hop);
}

void Dataplane::punt(rte_mbuf* m, uint16_t in, Counter* kind) {
    if (rings_.punt == nullptr || rte_ring_enqueue(rings_.punt, m) != 0) return drop(m, in, DropReason::punt_ring_full);
    wake_pending_ = true;
    counters_.punted.add();
    if (kind != nullptr) kind->add();
}

void Dataplane::wake_control() {
    if (!wake_pending_) return;
    wake_pending_ = false;
    ControlWake* w = rings_.wake;
    if (w == nullptr) return;
    // Orders our enqueues before the flag's load; pairs with the fence the control thread puts between
    // setting the flag and re-checking the rings (ControlWake). One fence per poll that punted.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!w->sleeping.load(std::memory_order_relaxed) || !w->sleeping.exchange(false, std::memory_order_relaxed))
        return;
    // A syscall on the lcore, and a rare one: only when the control thread has gone to sleep, at most
    // once per sleep (the flag is taken above), so never per packet while messages keep coming. An
    // eventfd write neither blocks (EFD_NONBLOCK, and the counter never nears its limit) nor allocates;
    // the kernel's wait-queue lock it takes is held for a wake-up, not across anything that waits.
    const uint64_t one = 1;
    if (::write(w->fd, &one, sizeof one) == sizeof one) counters_.control_wakeups.add();
}

void Dataplane::handle_peer_message(rte_mbuf* m, uint16_t in, const ParsedPacket& p, const ParsedMsg& msg) {
    int idx = -1;
    for (std::size_t i = 0; i < peers_.size(); ++i)
        if (peers_[i].cfg.addr == p.src_ip) idx = static_cast<int>(i);
    if (idx < 0 || peers_[idx].cfg.party != msg.header.sender_party || msg.header.channel >= kPeerChannels)
        return drop(m, in, DropReason::resolve_unknown_peer);
    DpPeerState& peer = peers_[idx];
    ReplayWindow& window = peer.windows[msg.header.channel];
    switch (window.check(msg.header.seq, SeqClock::realtime_ns(), resolve_cfg_.max_skew_ns)) {
    case ReplayVerdict::ok: break;
    case ReplayVerdict::stale:
    case ReplayVerdict::future: return drop(m, in, DropReason::resolve_clock_skew);
    case ReplayVerdict::replayed:
    case ReplayVerdict::too_old: return drop(m, in, DropReason::resolve_replayed);
    }
    const HmacKey* key = peer.keys.find(msg.header.key_id);
    if (key == nullptr) return drop(m, in, DropReason::resolve_unknown_key);
    // The cheap checks passed; the MAC costs about a microsecond: only within the peer's budget.
    if (peer.limited && !peer.verify_budget.allow(now_ms_)) return drop(m, in, DropReason::resolve_peer_rate_limited);
    if (!key->verify(msg.authenticated, msg.mac)) return drop(m, in, DropReason::resolve_bad_mac);
    window.accept(msg.header.seq);  // only now: a forged message never moves the window
    resolve_counters_.peer_msgs.add();

    switch (msg.header.type) {
    case MsgType::query: {
        QueryBody q;
        std::memcpy(&q, msg.body.data(), sizeof q);
        AnswerBody a{};
        std::memcpy(a.query_id, q.query_id, sizeof a.query_id);
        std::memcpy(a.target, q.target, sizeof a.target);
        if (const CacheEntry* e = resolver_->lookup_for_peer(ProcessId{load_be64(q.target)}, now_ms_); e != nullptr) {
            a.found = 1;
            encode(e->record, a.record);
        }
        const uint32_t to = p.src_ip;
        const uint16_t to_port = p.src_port;
        rte_pktmbuf_free(m);
        resolve_counters_.answers_sent.add();
        return send_message(to, to_port, MsgType::answer, 0, &a, sizeof a, idx);
    }
    case MsgType::answer: {
        AnswerBody a;
        std::memcpy(&a, msg.body.data(), sizeof a);
        std::optional<DmaAddress> record;
        if (a.found > 1 || a.reserved[0] != 0 || a.reserved[1] != 0 || a.reserved[2] != 0)
            return drop(m, in, DropReason::resolve_malformed);
        if (a.found == 1) {
            record = decode(a.record);
            if (!record) return drop(m, in, DropReason::resolve_malformed);
        }
        rte_pktmbuf_free(m);
        return resolver_->answer(idx, load_be64(a.query_id), ProcessId{load_be64(a.target)},
                                 record ? &*record : nullptr, now_ms_);
    }
    case MsgType::announce:
    case MsgType::withdraw:
    case MsgType::ack:
    case MsgType::sync: return punt(m, in, &resolve_counters_.punted_peer_msgs);
    case MsgType::hs_req:
    case MsgType::hs_rep:
    case MsgType::hs_rtu: return punt(m, in, &resolve_counters_.punted_handshakes);
    default: return drop(m, in, DropReason::resolve_unexpected);
    }
}

void Dataplane::send_message(uint32_t dst, uint16_t dst_port, MsgType type, uint64_t seq_or_id, const void* body,
                             uint16_t body_len, int peer, uint32_t body_sum, uint16_t summed_from) {
    OutMessage o = start_message(dst, dst_port, type, seq_or_id, body_len, peer);
    if (o.body == nullptr) return;
    std::memcpy(o.body, body, body_len);
    finish_message(o, body_sum, summed_from);
}

Dataplane::OutMessage Dataplane::start_message(uint32_t dst, uint16_t dst_port, MsgType type, uint64_t seq_or_id,
                                               uint16_t body_len, int peer) {
    OutMessage o;
    const int out = route(port_cfgs_, dst, &o.nh);
    if (out < 0) {
        ports_[0].counters.drop(DropReason::no_route);
        return o;
    }
    rte_mbuf* m = spare_;
    if (m != nullptr) {
        spare_ = nullptr;
        rte_pktmbuf_reset(m);
    } else if (m = rte_pktmbuf_alloc(pool_); m == nullptr) {
        ports_[out].counters.drop(DropReason::resolve_alloc_failed);
        return o;
    }
    o.out = static_cast<uint16_t>(out);
    o.msg_len = static_cast<uint16_t>(sizeof(MsgHeader) + body_len + (peer >= 0 ? kMacLen : 0));
    const uint16_t ip_len = static_cast<uint16_t>(sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + o.msg_len);
    char* data = rte_pktmbuf_append(m, sizeof(rte_ether_hdr) + ip_len);
    if (data == nullptr) {
        drop(m, o.out, DropReason::resolve_alloc_failed);
        return o;
    }
    reinterpret_cast<rte_ether_hdr*>(data)->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    o.ip = reinterpret_cast<rte_ipv4_hdr*>(data + sizeof(rte_ether_hdr));
    auto* msg = reinterpret_cast<uint8_t*>(o.ip) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr);
    o.h = Header{type, peer >= 0 ? resolve_cfg_.resolver.party_id : uint16_t{0}, body_len,
                 peer >= 0 ? seq_.next() : seq_or_id, peer >= 0 ? peer_channel_of_worker(worker_.index) : uint8_t{0}};
    // Straight into the packet (MsgHeader is byte-aligned): a copy made on the stack and then
    // moved stalled on store forwarding, half of this function's time in `perf`.
    encode(o.h, *reinterpret_cast<MsgHeader*>(msg));
    o.m = m;
    o.body = msg + sizeof(MsgHeader);
    o.dst = dst;
    o.dst_port = dst_port;
    o.peer = peer;
    return o;
}

[[gnu::always_inline]] inline void Dataplane::finish_message(OutMessage& o, uint32_t body_sum, uint16_t summed_from) {
    rte_mbuf* const m = o.m;
    rte_ipv4_hdr* const ip = o.ip;
    const uint16_t body_len = o.h.body_len, msg_len = o.msg_len, out = o.out;
    const uint32_t src = ports_[out].cfg.addr;
    if (o.peer >= 0) peers_[o.peer].keys.seal(std::span<uint8_t>(o.body - sizeof(MsgHeader), msg_len));
    if (ports_[out].cfg.tx_cksum) {
        // The device sums both: the IPv4 header's field 0, the UDP one holding the pseudo-header's sum.
        write_udp_ipv4_headers(ip, src, o.dst, resolve_port_be_, o.dst_port, msg_len);
        m->l2_len = sizeof(rte_ether_hdr);
        m->l3_len = sizeof(rte_ipv4_hdr);
        m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_UDP_CKSUM;
        reinterpret_cast<rte_udp_hdr*>(ip + 1)->dgram_cksum = rte_ipv4_phdr_cksum(ip, m->ol_flags);
    } else if (o.peer < 0 && summed_from == 0) {  // the caller's sum covers the body: the header's from its values
        write_udp_ipv4_summed(ip, src, o.dst, resolve_port_be_, o.dst_port, msg_len, uint64_t{header_sum(o.h)} + body_sum);
    } else if (o.peer >= 0 || summed_from >= body_len) {  // a sealed message changed after the body: sum it all
        write_udp_ipv4(ip, src, o.dst, resolve_port_be_, o.dst_port, msg_len);
    } else {
        write_udp_ipv4(ip, src, o.dst, resolve_port_be_, o.dst_port, msg_len, body_sum,
                       static_cast<uint16_t>(sizeof(MsgHeader) + summed_from));
    }
    send_ipv4_memo(m, out, o.nh, o.neigh);
}

void Dataplane::write_udp_ipv4_headers(rte_ipv4_hdr* ip, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport,
                                       uint16_t payload_len) {
    store_udp_ipv4(ip, src, dst, sport, dport, payload_len, 0, 0);
}

void Dataplane::write_udp_ipv4(rte_ipv4_hdr* ip, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport,
                               uint16_t payload_len, uint32_t tail_sum, uint16_t summed_from) {
    // The payload's head read, its tail's sum given; the headers from the values being written,
    // never read back after they are written (which stalled on store forwarding: a sixth of a
    // cache hit's time in `perf`).
    const auto* payload = reinterpret_cast<const uint8_t*>(ip) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr);
    const uint64_t payload_sum = summed_from >= payload_len
                                     ? uint64_t{rte_raw_cksum(payload, payload_len)}
                                     : uint64_t{rte_raw_cksum(payload, summed_from)} + tail_sum;
    write_udp_ipv4_summed(ip, src, dst, sport, dport, payload_len, payload_sum);
}

void Dataplane::reply(const Requester& r, ProcessId target, ResolveStatus status, AnswerSource source,
                      const DmaAddress* record) {
    if (r.control != nullptr) {
        auto& req = *static_cast<DpRequest*>(r.control);
        req.status = status;
        req.source = source;
        if (record != nullptr) req.record = *record;
        req.now_ms = now_ms_;
        req.done.store(true, std::memory_order_release);
        return;
    }
    ResolveReplyBody b{};
    b.status = static_cast<uint8_t>(status);
    b.source = static_cast<uint8_t>(source);
    store_be64(b.target, target.value);
    if (record != nullptr) encode(*record, b.record);
    resolve_counters_.replies_sent.add();
    send_message(r.ip, r.port, MsgType::resolve_reply, r.request_id, &b, sizeof b, -1);
}

void Dataplane::reply_hit(const Requester& r, ProcessId target, AnswerSource source, const CacheEntry& e) {
    if (r.control != nullptr) return reply(r, target, ResolveStatus::ok, source, &e.record);
    OutMessage o = start_message(r.ip, r.port, MsgType::resolve_reply, r.request_id, sizeof(ResolveReplyBody), -1);
    if (o.body == nullptr) return;
    resolve_counters_.replies_sent.add();
    finish_message(o, write_hit_body(o.body, target, source, e), 0);
}

void Dataplane::reply_l2(rte_mbuf* m, ReplyRoute& rr) {
    const Neighbour* const n = send_ipv4_memo(m, rr.out, rr.nh, &rr.neigh);
    if (n == nullptr) return;  // not kept: the next hit recalls again
    rr.l2 = FrameHead::of(*n, ports_[rr.out].cfg.mac);
    rr.l2_until = n->permanent ? UINT64_MAX : n->confirmed_ms + neigh_.timers().reachable_ms;
    rr.l2_version = neigh_.version();
}

[[gnu::always_inline]] inline uint32_t Dataplane::write_hit_body(uint8_t* body, ProcessId target, AnswerSource source,
                                                                 const CacheEntry& e) {
    store_be64(reinterpret_cast<ResolveReplyBody*>(body)->target, target.value);
    return write_hit_record(body, source, e) + stored64_sum(target.value);
}

[[gnu::always_inline]] inline uint32_t Dataplane::write_hit_record(uint8_t* body, AnswerSource source, const CacheEntry& e) {
    // Written in place, field by field: nothing of the reply is read back, here or to sum it.
    auto* b = reinterpret_cast<ResolveReplyBody*>(body);
    b->status = static_cast<uint8_t>(ResolveStatus::ok);
    b->source = static_cast<uint8_t>(source);
    b->reserved[0] = b->reserved[1] = 0;
    // 16 bytes at a time: the struct's assignment became a `rep movs` (a ninth of a hit in `perf`).
    static_assert(sizeof e.wire % 16 == 0);
    for (std::size_t i = 0; i < sizeof e.wire; i += 16)
        std::memcpy(reinterpret_cast<uint8_t*>(&b->record) + i, reinterpret_cast<const uint8_t*>(&e.wire) + i, 16);
    // The sum, its head (status, source, reserved) from the values written; the record's, summed
    // in memory order at upsert (before, a hit folded and swapped a big-endian sum: 8 instructions).
    return stored16(static_cast<uint16_t>(static_cast<uint8_t>(ResolveStatus::ok) << 8 | static_cast<uint8_t>(source))) +
           e.wire_sum;
}

void Dataplane::query(int peer, uint64_t query_id, ProcessId target, QueryMode mode) {
    QueryBody q{};
    store_be64(q.query_id, query_id);
    store_be64(q.target, target.value);
    q.mode = static_cast<uint8_t>(mode);
    resolve_counters_.queries_sent.add();
    send_message(peers_[peer].cfg.addr, resolve_port_be_, MsgType::query, 0, &q, sizeof q, peer);
}

void Dataplane::learned(ProcessId key, const DmaAddress* record, uint16_t owner_party) {
    ResolveEvent ev;
    ev.key = key;
    if (record != nullptr) ev.record = *record;
    ev.owner_party = owner_party;
    ev.negative = record == nullptr ? 1 : 0;
    if (rings_.events == nullptr || rte_ring_enqueue_elem(rings_.events, &ev, sizeof ev) != 0)
        return resolve_counters_.events_lost.add();
    wake_pending_ = true;
}

}  // namespace fedgate
