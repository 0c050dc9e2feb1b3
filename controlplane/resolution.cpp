// The resolution service's control side: registrations, announce streams, cache writes.
#include "controlplane/resolution.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <random>
#include <unordered_set>

#include "controlplane/log.hpp"
#include "controlplane/store_writers.hpp"
#include "proto/conn_wire.hpp"
#include "dataplane/dataplane.hpp"

namespace fedgate {
namespace {

uint64_t random_stream_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    uint64_t v = 0;
    while (v == 0) v = rng();
    return v;
}

std::string gid_str(const std::array<uint8_t, 16>& gid) {
    char buf[INET6_ADDRSTRLEN];
    return inet_ntop(AF_INET6, gid.data(), buf, sizeof buf) != nullptr ? buf : "?";
}

template <typename T>
T body_as(std::span<const uint8_t> body, std::size_t offset = 0) {
    T v;
    std::memcpy(&v, body.data() + offset, sizeof v);
    return v;
}

PeerKeys peer_keys(const PeerConfig& p) { return PeerKeys({p.key, p.key_id}, {p.next_key, p.next_key_id}); }

}  // namespace

ResolutionService::ResolutionService(const Config& cfg, ResolveCache& cache, SendUdp send, Synchronize sync)
    : cfg_(&cfg),
      cache_(cache),
      send_(std::move(send)),
      sync_(std::move(sync)),
      dir_(cfg.party_id, cfg.resolve.cache_capacity, cfg.resolve.heartbeat_timeout_ms),
      relay_(cfg.party_id, cfg.connect, *this),
      remote_version_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count())) {
    for (const PeerConfig& p : cfg.peers)
        peers_.push_back(std::make_unique<Peer>(
            Peer{p, peer_keys(p), AnnounceSender(cfg.resolve.announce_window, cfg.resolve.retransmit_ms), {}}));
}

ResolutionService::~ResolutionService() = default;

void ResolutionService::start(uint64_t now_ms) {
    std::lock_guard lock(mu_);
    if (!cfg_->resolve.announce) return;
    for (auto& p : peers_) restart_stream(*p, now_ms);
}

std::vector<uint16_t> ResolutionService::reload(std::shared_ptr<const Config> next, uint64_t now_ms) {
    std::lock_guard lock(mu_);
    const Config& c = *next;
    std::vector<std::unique_ptr<Peer>> peers;
    for (const PeerConfig& p : c.peers) {
        // The same peer (party and address), its keys changed or not: its streams carry on, and a
        // key rotation takes effect with the next message.
        const auto same = std::find_if(peers_.begin(), peers_.end(), [&](const auto& o) {
            return o && o->cfg.party_id == p.party_id && o->cfg.party == p.party && o->cfg.address == p.address;
        });
        if (same != peers_.end()) {
            (*same)->cfg = p;
            (*same)->keys = peer_keys(p);
            peers.push_back(std::move(*same));
            continue;
        }
        peers.push_back(std::make_unique<Peer>(
            Peer{p, peer_keys(p), AnnounceSender(c.resolve.announce_window, c.resolve.retransmit_ms), {}}));
        restart_stream(*peers.back(), now_ms);
    }
    std::vector<uint16_t> removed;
    for (const auto& old : peers_) {
        if (!old) continue;
        const uint16_t party = old->cfg.party_id;
        if (std::any_of(c.peers.begin(), c.peers.end(), [&](const PeerConfig& p) { return p.party_id == party; }))
            continue;  // changed, not removed: the new stream's snapshot replaces what it announced
        removed.push_back(party);
        counters_.records_withdrawn += cache_.remove_if([party](const CacheEntry& e) {
            return e.owner_party == party && e.kind != CacheKind::local && e.kind != CacheKind::negative;
        });
        if (auto_ != nullptr) auto_->peer_removed(party);
        if (roce_ != nullptr) roce_->remove_peer(party);
    }
    peers_ = std::move(peers);
    held_ = std::move(next);
    cfg_ = held_.get();
    ++remote_version_;
    reclaim();
    return removed;
}

std::map<uint16_t, uint8_t> ResolutionService::last_key_ids() const {
    std::lock_guard lock(mu_);
    std::map<uint16_t, uint8_t> out;
    for (const auto& p : peers_) out[p->cfg.party_id] = p->last_key_id;
    return out;
}

void ResolutionService::restart_stream(Peer& peer, uint64_t now_ms) {
    if (!cfg_->resolve.announce) return;
    peer.out.restart(random_stream_id(), dir_.records(), now_ms);
}

ResolutionService::Peer* ResolutionService::peer_by_party(uint16_t party) {
    for (auto& p : peers_)
        if (p->cfg.party_id == party) return p.get();
    return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Sending.

void ResolutionService::send_peer(Peer& peer, MsgType type, std::span<const uint8_t> body) {
    std::vector<uint8_t> d(sizeof(MsgHeader) + body.size() + kMacLen);
    MsgHeader h;
    encode(Header{type, cfg_->party_id, static_cast<uint16_t>(body.size()), seq_.next(), 1}, h);
    std::memcpy(d.data(), &h, sizeof h);
    std::memcpy(d.data() + sizeof h, body.data(), body.size());
    peer.keys.seal(d);
    send_(peer.cfg.address, cfg_->resolve.port, d);
    ++counters_.peer_msgs_sent;
}

void ResolutionService::send_ack(Peer& peer, uint64_t stream, uint64_t acked, uint8_t flags) {
    AckBody a{};
    store_be64(a.stream, stream);
    store_be64(a.acked, acked);
    a.flags = flags;
    if ((flags & kAckReset) != 0) ++counters_.stream_resets_sent;
    send_peer(peer, MsgType::ack, {reinterpret_cast<const uint8_t*>(&a), sizeof a});
}

void ResolutionService::reg_reply(uint32_t dst, uint16_t dst_port, uint64_t request_id, RegStatus s, ProcessId pid,
                                  uint32_t epoch) {
    std::vector<uint8_t> d(sizeof(MsgHeader) + sizeof(RegReplyBody));
    MsgHeader h;
    encode(Header{MsgType::reg_reply, 0, sizeof(RegReplyBody), request_id, 0}, h);
    RegReplyBody b{};
    b.status = static_cast<uint8_t>(s);
    store_be64(b.pid, pid.value);
    store_be32(b.epoch, epoch);
    store_be32(b.heartbeat_ms, cfg_->resolve.heartbeat_ms);
    std::memcpy(d.data(), &h, sizeof h);
    std::memcpy(d.data() + sizeof h, &b, sizeof b);
    send_(dst, dst_port, d);
    ++counters_.reg_replies_sent;
}

// ---------------------------------------------------------------------------------------------
// Receiving.

void ResolutionService::on_message(uint32_t src, uint16_t src_port, std::span<const uint8_t> datagram,
                                   uint64_t now_ms) {
    std::lock_guard lock(mu_);
    now_ms_ = now_ms;
    ParsedMsg m;
    if (parse_message(datagram, m) != WireError::ok) {
        ++counters_.malformed;  // the lcore checked it; only a bug gets here
        return;
    }
    if (!is_peer_message(m.header.type)) return handle_client(src, src_port, m, now_ms);
    Peer* peer = peer_by_party(m.header.sender_party);
    if (peer == nullptr || peer->cfg.address != src) {
        ++counters_.malformed;
        return;
    }
    handle_peer(*peer, m, now_ms);
}

void ResolutionService::handle_client(uint32_t src, uint16_t src_port, const ParsedMsg& m, uint64_t now_ms) {
    DirectoryChange change;
    switch (m.header.type) {
    case MsgType::reg: {
        const auto rec = decode(body_as<RegisterBody>(m.body).record);
        if (!rec) return reg_reply(src, src_port, m.header.seq, RegStatus::bad_record, {}, 0);
        const RegStatus s = dir_.register_process(*rec, src, now_ms, &change);
        if (s == RegStatus::ok) control_ports_[rec->pid.value] = src_port;
        if (store_ != nullptr && s == RegStatus::ok && change.kind != DirectoryChange::Kind::none) {
            // In the group's store before the process hears "ok" (flush()).
            staged_.push_back({change, {*rec, src, src_port}, src, src_port, m.header.seq, true});
            return;
        }
        reg_reply(src, src_port, m.header.seq, s, rec->pid, rec->epoch);
        break;
    }
    case MsgType::heartbeat:
    case MsgType::deregister: {
        const auto ref = body_as<ProcessRefBody>(m.body);
        const ProcessId pid{load_be64(ref.pid)};
        const uint32_t epoch = load_be32(ref.epoch);
        const RegStatus s = m.header.type == MsgType::heartbeat ? dir_.heartbeat(pid, epoch, src, now_ms)
                                                                : dir_.deregister(pid, epoch, src, &change);
        if (s == RegStatus::ok && m.header.type == MsgType::heartbeat) control_ports_[pid.value] = src_port;
        if (store_ != nullptr && s == RegStatus::ok && change.kind == DirectoryChange::Kind::removed) {
            staged_.push_back({change, {change.record, src, src_port}, src, src_port, m.header.seq, true});
            return;
        }
        reg_reply(src, src_port, m.header.seq, s, pid, epoch);
        break;
    }
    case MsgType::conn_req:
    case MsgType::conn_rep:
    case MsgType::conn_rtu: {
        const auto p = decode(body_as<ConnBody>(m.body));
        if (!p) {
            ++counters_.malformed_handshakes;
            return;
        }
        return relay_.on_client(m.header.type, Endpoint4{src, src_port}, *p, now_ms);
    }
    default: ++counters_.malformed; return;
    }
    publish(change, now_ms);
}

// A local change goes into the cache (the lcore answers from it at once) and out to every peer.
void ResolutionService::publish(const DirectoryChange& c, uint64_t now_ms) {
    if (c.kind != DirectoryChange::Kind::none)
        FG_LOG(DEBUG, resolve, "process %s epoch %u %s", format_process_id(c.record.pid).c_str(), c.record.epoch,
               c.kind == DirectoryChange::Kind::added      ? "registered"
               : c.kind == DirectoryChange::Kind::replaced ? "registered again (new epoch)"
                                                           : "left");
    switch (c.kind) {
    case DirectoryChange::Kind::none: return;
    case DirectoryChange::Kind::added:
    case DirectoryChange::Kind::replaced:
        if (cache_.upsert(c.record.pid, c.record, CacheKind::local, cfg_->party_id, UINT64_MAX) ==
            ResolveCache::Upsert::full)
            ++counters_.cache_full;
        if (cfg_->resolve.announce)
            for (auto& p : peers_) p->out.announce(c.record);
        if (auto_ != nullptr) auto_->process_registered(c.record);
        break;
    case DirectoryChange::Kind::removed:
        process_gone(c.record);
        cache_.remove(c.record.pid);
        if (cfg_->resolve.announce)
            for (auto& p : peers_) p->out.withdraw(c.record.pid, c.record.epoch);
        break;
    }
    (void)now_ms;
}

void ResolutionService::handle_peer(Peer& peer, const ParsedMsg& m, uint64_t now_ms) {
    peer.last_key_id = m.header.key_id;  // the lcore checked the MAC under this key
    switch (m.header.type) {
    case MsgType::announce:
    case MsgType::withdraw: {
        const auto sb = body_as<StreamBody>(m.body);
        const uint64_t stream = load_be64(sb.stream), seq = load_be64(sb.seq);
        const auto v = peer.in.on_message(stream, seq, sb.flags);
        switch (v) {
        case AnnounceReceiver::Verdict::apply_snapshot:
            ++counters_.snapshots_received;
            [[fallthrough]];
        case AnnounceReceiver::Verdict::apply:
            apply_stream(peer, m, v == AnnounceReceiver::Verdict::apply_snapshot);
            break;
        case AnnounceReceiver::Verdict::gap: ++counters_.stream_gaps; break;
        case AnnounceReceiver::Verdict::duplicate: break;
        case AnnounceReceiver::Verdict::unknown_stream: return send_ack(peer, stream, 0, kAckReset);
        }
        return send_ack(peer, peer.in.stream(), peer.in.applied(), 0);
    }
    case MsgType::ack: {
        const auto a = body_as<AckBody>(m.body);
        if (peer.out.on_ack(load_be64(a.stream), load_be64(a.acked), a.flags, now_ms)) restart_stream(peer, now_ms);
        return;
    }
    case MsgType::sync: {
        const auto s = body_as<SyncBody>(m.body);
        const uint64_t stream = load_be64(s.stream);
        switch (peer.in.on_sync(stream, load_be64(s.last_seq))) {
        case AnnounceReceiver::Verdict::unknown_stream: return send_ack(peer, stream, 0, kAckReset);
        case AnnounceReceiver::Verdict::gap: ++counters_.stream_gaps; [[fallthrough]];
        default: return send_ack(peer, stream, peer.in.applied(), 0);
        }
    }
    case MsgType::hs_req:
    case MsgType::hs_rep:
    case MsgType::hs_rtu: {
        const auto p = decode(body_as<ConnBody>(m.body));
        if (!p) {
            ++counters_.malformed_handshakes;
            return;
        }
        return relay_.on_peer(m.header.type, peer.cfg.party_id, *p, now_ms);
    }
    default: ++counters_.malformed; return;
    }
}

void ResolutionService::process_gone(const DmaAddress& r) {
    control_ports_.erase(r.pid.value);
    if (auto_ != nullptr) auto_->process_left(r.pid);
    if (roce_ != nullptr) roce_->remove_process(r.pid);
}

void ResolutionService::apply_stream(Peer& peer, const ParsedMsg& m, bool snapshot) {
    const uint16_t party = peer.cfg.party_id;
    if (snapshot) {
        cache_.remove_if([party](const CacheEntry& e) { return e.kind == CacheKind::announced && e.owner_party == party; });
    }
    const auto sb = body_as<StreamBody>(m.body);
    const std::size_t count = load_be16(sb.count);
    if (m.header.type == MsgType::announce) {
        for (std::size_t i = 0; i < count; ++i) {
            const auto rec = decode(body_as<DmaAddressWire>(m.body, sizeof(StreamBody) + i * sizeof(DmaAddressWire)));
            // A peer speaks only for its own party's processes.
            if (!rec || rec->pid.party() != party) {
                ++counters_.refused_foreign_records;
                continue;
            }
            const CacheEntry* old = cache_.find(rec->pid, 0);
            if (old != nullptr && old->kind == CacheKind::local) continue;  // never trust hearsay over our own
            if (cache_.upsert(rec->pid, *rec, CacheKind::announced, party, UINT64_MAX) == ResolveCache::Upsert::full)
                ++counters_.cache_full;
            else
                ++counters_.records_applied;
        }
    } else {
        for (std::size_t i = 0; i < count; ++i) {
            const auto ref = body_as<ProcessRefBody>(m.body, sizeof(StreamBody) + i * sizeof(ProcessRefBody));
            const ProcessId pid{load_be64(ref.pid)};
            // The record itself, and what a party-0 query learned about it: both name the process
            // that left (the same epoch; a newer one was announced after and stays).
            for (const ProcessId key : {pid, pid.with_party(0)}) {
                const CacheEntry* e = cache_.find(key, 0);
                if (e != nullptr && e->owner_party == party && e->kind != CacheKind::local &&
                    e->kind != CacheKind::negative && e->record.pid == pid && e->record.epoch == load_be32(ref.epoch)) {
                    cache_.remove(key);
                    ++counters_.records_withdrawn;
                }
            }
            if (auto_ != nullptr) auto_->peer_process_left(pid);
            if (roce_ != nullptr) roce_->remove_process(pid);
        }
    }
    ++remote_version_;  // a standby asking for our remote records gets them again
    reclaim();
}

void ResolutionService::on_event(const ResolveEvent& ev, uint64_t now_ms) {
    std::lock_guard lock(mu_);
    const CacheEntry* old = cache_.find(ev.key, now_ms);
    // Announced and local records are better than anything a query taught us.
    if (old != nullptr && (old->kind == CacheKind::local || old->kind == CacheKind::announced)) return;
    if (ev.negative != 0) {
        if (cfg_->resolve.negative_ttl_ms == 0) return;
        cache_.upsert(ev.key, DmaAddress{}, CacheKind::negative, 0, now_ms + cfg_->resolve.negative_ttl_ms);
        ++counters_.learned_negative;
    } else {
        const uint64_t ttl_s = ev.record.ttl_s != 0 ? ev.record.ttl_s : cfg_->resolve.answer_ttl_s;
        if (cache_.upsert(ev.key, ev.record, CacheKind::answered, ev.owner_party, now_ms + ttl_s * 1000) ==
            ResolveCache::Upsert::full)
            ++counters_.cache_full;
        ++counters_.learned;
    }
    ++remote_version_;
    reclaim();
}

// ---------------------------------------------------------------------------------------------
// Timers.

void ResolutionService::tick(uint64_t now_ms) {
    std::lock_guard lock(mu_);
    now_ms_ = now_ms;
    for (const DmaAddress& gone : dir_.expire(now_ms)) {
        if (store_ != nullptr)
            staged_.push_back({{DirectoryChange::Kind::removed, gone}, {gone, 0, 0}, 0, 0, 0, false});
        else
            publish({DirectoryChange::Kind::removed, gone}, now_ms);
    }
    relay_.expire(now_ms);
    if (roce_ != nullptr) roce_->tick(now_ms, uint64_t{cfg_->connect.rdma_idle_s} * 1000);
    for (auto& p : peers_) {
        Peer& peer = *p;
        peer.out.poll(now_ms, [&](MsgType type, const std::vector<uint8_t>& body) { send_peer(peer, type, body); });
    }
    if (now_ms >= next_sync_ms_) {
        next_sync_ms_ = now_ms + cfg_->resolve.sync_interval_ms;
        if (cfg_->resolve.announce) {
            const auto records = static_cast<uint32_t>(dir_.size());
            for (auto& p : peers_) {
                const SyncBody b = p->out.sync_body(records);
                send_peer(*p, MsgType::sync, {reinterpret_cast<const uint8_t*>(&b), sizeof b});
            }
        }
    }
    // Only answered and negative entries expire; with none, there is nothing to sweep. Otherwise
    // a slice per tick, so the whole table goes round about once a second whatever its size.
    if (cache_.size(CacheKind::answered) + cache_.size(CacheKind::negative) != 0)
        counters_.expired_cache_entries +=
            cache_.sweep_expired(&sweep_cursor_, std::max<std::size_t>(64, cache_.bucket_count() / 100), now_ms);
    reclaim();
}

void ResolutionService::reclaim() { cache_.reclaim(sync_); }

// ---------------------------------------------------------------------------------------------
// The handshake relay's view of this gateway.

std::optional<Endpoint4> ResolutionService::control_endpoint(ProcessId pid) {
    const auto p = dir_.find(pid);
    const auto port = control_ports_.find(pid.value);
    if (!p || port == control_ports_.end()) return std::nullopt;
    return Endpoint4{p->source, port->second};
}

bool ResolutionService::has_peer(uint16_t party) { return peer_by_party(party) != nullptr; }

void ResolutionService::to_process(Endpoint4 dst, MsgType type, const ConnParams& p) {
    std::vector<uint8_t> d(sizeof(MsgHeader) + sizeof(ConnBody));
    MsgHeader h;
    encode(Header{type, 0, sizeof(ConnBody), 0, 0}, h);
    ConnBody b;
    encode(p, b);
    std::memcpy(d.data(), &h, sizeof h);
    std::memcpy(d.data() + sizeof h, &b, sizeof b);
    send_(dst.addr, dst.port, d);
}

void ResolutionService::to_peer(uint16_t party, MsgType type, const ConnParams& p) {
    Peer* peer = peer_by_party(party);
    if (peer == nullptr) return;
    ConnBody b;
    encode(p, b);
    send_peer(*peer, type, {reinterpret_cast<const uint8_t*>(&b), sizeof b});
}

std::optional<Endpoint4> ResolutionService::exported_endpoint(ProcessId target) {
    const PortConfig* ext = cfg_->port(PortRoleCfg::external);
    if (auto_ == nullptr || ext == nullptr) return std::nullopt;
    const auto port = auto_->exported_port(target);
    if (!port) return std::nullopt;
    return Endpoint4{ext->address.addr, *port};
}

std::optional<Endpoint4> ResolutionService::imported_endpoint(uint16_t party, uint16_t peer_port, ProcessId target,
                                                              ProcessId initiator) {
    const PortConfig* in = cfg_->port(PortRoleCfg::internal);
    const Peer* peer = peer_by_party(party);
    if (auto_ == nullptr || in == nullptr || peer == nullptr || peer_port == 0) return std::nullopt;
    const auto port = auto_->import_port(peer->cfg, peer_port, target, initiator);
    if (!port) return std::nullopt;
    return Endpoint4{in->address.addr, *port};
}

std::optional<uint32_t> ResolutionService::roce_reserve(RoceSide side) {
    if (roce_ == nullptr || roce_->address(side) == 0) return std::nullopt;
    return roce_->reserve(side);
}

void ResolutionService::roce_release(RoceSide side, uint32_t vqpn) {
    if (roce_ != nullptr) roce_->release(side, vqpn);
}

bool ResolutionService::roce_install(const RoceConn& c) {
    if (roce_ == nullptr) return false;
    // A process that left while its handshake finished gets no translation.
    if (!dir_.find(c.local)) {
        roce_release(RoceSide::internal, c.internal_vqpn);
        roce_release(RoceSide::external, c.external_vqpn);
        return false;
    }
    return roce_->install(c, now_ms_);
}

uint32_t ResolutionService::own_address(RoceSide side) {
    return roce_ != nullptr ? ntohl(roce_->address(side)) : 0;
}

uint32_t ResolutionService::peer_address(uint16_t party) {
    const Peer* p = peer_by_party(party);
    return p != nullptr ? p->cfg.address : 0;
}

nlohmann::ordered_json ResolutionService::conn_list(std::size_t limit, uint64_t now_ms) const {
    std::lock_guard lock(mu_);
    nlohmann::ordered_json j = relay_.list(limit, now_ms);
    j["translations"] = roce_ != nullptr ? roce_->list(limit, now_ms) : nlohmann::ordered_json::array();
    return j;
}

// ---------------------------------------------------------------------------------------------
// Management.

nlohmann::ordered_json ResolutionService::record_json(const DmaAddress& r) {
    return {{"pid", format_process_id(r.pid)},
            {"epoch", r.epoch},
            {"transport", transport_name(r.transport)},
            {"address", format_ipv4(r.ipv4) + ":" + std::to_string(r.port)},
            {"gid", gid_str(r.gid)},
            {"qpn", r.qpn},
            {"mtu", r.mtu},
            {"flags", r.flags},
            {"ttl_s", r.ttl_s}};
}

namespace {

nlohmann::ordered_json entry_json(const CacheEntry& e, const Config& cfg, uint64_t now_ms) {
    nlohmann::ordered_json j;
    j["key"] = format_process_id(e.key);
    j["kind"] = cache_kind_name(e.kind);
    std::string owner = std::to_string(e.owner_party);
    if (e.owner_party == cfg.party_id) owner = cfg.party;
    for (const PeerConfig& p : cfg.peers)
        if (p.party_id == e.owner_party) owner = p.party;
    j["owner"] = e.kind == CacheKind::negative ? "" : owner;
    if (e.expires_ms == UINT64_MAX)
        j["expires_in_ms"] = nullptr;
    else
        j["expires_in_ms"] = e.expires_ms > now_ms ? e.expires_ms - now_ms : 0;
    if (e.kind != CacheKind::negative) j["record"] = ResolutionService::record_json(e.record);
    return j;
}

}  // namespace

nlohmann::ordered_json ResolutionService::dir_list(bool local, bool remote, std::size_t limit, uint64_t now_ms) const {
    std::lock_guard lock(mu_);
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    // The total comes from the cache's counts (it may include a few expired entries the sweep has
    // not reached), so listing a few entries of a million does not walk them all under the lock.
    const std::size_t n_local = cache_.size(CacheKind::local);
    const std::size_t total = (local ? n_local : 0) + (remote ? cache_.size() - n_local : 0);
    cache_.for_each([&](const CacheEntry& e) {
        if (e.expires_ms <= now_ms) return true;
        const bool is_local = e.kind == CacheKind::local;
        if ((is_local && !local) || (!is_local && !remote)) return true;
        entries.push_back(entry_json(e, *cfg_, now_ms));
        return entries.size() < limit;
    });
    return {{"total", total}, {"shown", entries.size()}, {"entries", entries}};
}

nlohmann::ordered_json ResolutionService::dir_show(ProcessId pid, uint64_t now_ms) const {
    std::lock_guard lock(mu_);
    const CacheEntry* e = cache_.find(pid, now_ms);
    if (e == nullptr) throw std::runtime_error("process " + format_process_id(pid) + " is not in the directory");
    nlohmann::ordered_json j = entry_json(*e, *cfg_, now_ms);
    if (const auto p = dir_.find(pid)) {
        j["source"] = format_ipv4(p->source);
        j["registered_ms_ago"] = now_ms > p->registered_ms ? now_ms - p->registered_ms : 0;
        j["heartbeat_expires_in_ms"] = p->expires_ms > now_ms ? p->expires_ms - now_ms : 0;
    }
    return j;
}

nlohmann::ordered_json ResolutionService::stats() const {
    std::lock_guard lock(mu_);
    const DirectoryCounters d = dir_.counters();
    nlohmann::ordered_json peers = nlohmann::ordered_json::array();
    for (const auto& p : peers_) {
        const AnnounceSenderStats& s = p->out.stats();
        peers.push_back({{"party", p->cfg.party},
                         {"out_stream_acked", p->out.acked()},
                         {"out_stream_last_seq", p->out.last_seq()},
                         {"out_unacked", p->out.unacked() + p->out.queued()},
                         {"out_messages", s.messages_sent},
                         {"out_retransmits", s.retransmits},
                         {"out_restarts", s.restarts},
                         {"records_announced", s.records_announced},
                         {"records_withdrawn", s.records_withdrawn},
                         {"in_applied", p->in.applied()}});
    }
    const ResolutionCounters& c = counters_;
    return {
        {"directory",
         {{"local", dir_.size()}, {"registered", d.registered}, {"refreshed", d.refreshed}, {"replaced", d.replaced},
          {"deregistered", d.deregistered}, {"expired", d.expired}, {"heartbeats", d.heartbeats},
          {"refused_wrong_party", d.refused_wrong_party}, {"refused_address", d.refused_address},
          {"refused_unknown", d.refused_unknown}, {"refused_stale_epoch", d.refused_stale_epoch},
          {"refused_bad_record", d.refused_bad_record}, {"refused_full", d.refused_full},
          {"store_failures", c.store_failures}, {"taken_over", c.taken_over}, {"taken_over_warm", c.taken_over_warm},
          {"store_writes", c.store_writes}, {"store_write_ms", c.store_write_us / 1000},
          {"store_writes_in_flight", in_flight_.size()},
          {"warm", warm_size()}, {"warm_loads", warm_loads()}}},
        {"cache",
         {{"entries", cache_.size()}, {"capacity", cache_.capacity()}, {"local", cache_.size(CacheKind::local)},
          {"announced", cache_.size(CacheKind::announced)}, {"answered", cache_.size(CacheKind::answered)},
          {"negative", cache_.size(CacheKind::negative)}, {"full", c.cache_full},
          {"expired", c.expired_cache_entries}, {"learned", c.learned}, {"learned_negative", c.learned_negative}}},
        {"exchange",
         {{"peer_msgs_sent", c.peer_msgs_sent}, {"records_applied", c.records_applied},
          {"records_withdrawn", c.records_withdrawn}, {"refused_foreign_records", c.refused_foreign_records},
          {"snapshots_received", c.snapshots_received}, {"stream_resets_sent", c.stream_resets_sent},
          {"stream_gaps", c.stream_gaps}, {"reg_replies_sent", c.reg_replies_sent}, {"malformed", c.malformed},
          {"peers", peers}}},
        {"handshakes",
         [&] {
             nlohmann::ordered_json h = relay_.stats();
             h["malformed"] = c.malformed_handshakes;
             return h;
         }()},
        {"auto_mappings", auto_ != nullptr ? auto_->stats() : nlohmann::ordered_json::object()},
        {"roce", roce_ != nullptr ? roce_->stats() : nlohmann::ordered_json::object()},
    };
}

void ResolutionService::set_directory_writers(std::unique_ptr<StoreWriters> writers, std::size_t max_batch) {
    std::lock_guard lock(mu_);
    writers_ = std::move(writers);
    max_batch_ = std::max<std::size_t>(max_batch, 1);
}

void ResolutionService::stop_directory_writers() {
    std::unique_ptr<StoreWriters> w;
    {
        std::lock_guard lock(mu_);
        w = std::move(writers_);
        in_flight_.clear();
        in_flight_pids_.clear();
    }
    w.reset();  // joins the writers: outside mu_, which their wake-ups never take anyway
}

void ResolutionService::flush(uint64_t now_ms) {
    std::lock_guard lock(mu_);
    if (store_ == nullptr) return;
    if (!writers_) {
        if (staged_.empty()) return;
        std::vector<Staged> batch;
        batch.swap(staged_);
        const StoreWriters::Done d = StoreWriters::write(*store_, ops_of(batch));
        return finish(batch, d.error, d.write_us, now_ms);
    }
    for (StoreWriters::Done& d : writers_->take_done()) {
        const auto it = in_flight_.find(d.id);
        if (it == in_flight_.end()) continue;
        std::vector<Staged> batch = std::move(it->second);
        in_flight_.erase(it);
        for (const Staged& st : batch) {
            const auto p = in_flight_pids_.find(st.stored.record.pid.value);
            if (p != in_flight_pids_.end() && --p->second == 0) in_flight_pids_.erase(p);
        }
        finish(batch, d.error, d.write_us, now_ms);
    }
    submit_staged();
}

std::vector<DirectoryStore::Op> ResolutionService::ops_of(const std::vector<Staged>& batch) {
    std::vector<DirectoryStore::Op> ops;
    ops.reserve(batch.size());
    for (const Staged& st : batch) ops.push_back({st.change.kind == DirectoryChange::Kind::removed, st.stored});
    return ops;
}

// What is staged goes out on the idle writers, a batch each (with two writes out, only a batch of
// kBusyBatch); a process with a change in flight keeps its later ones here until that write is
// back, so the store sees its changes in order.
void ResolutionService::submit_staged() {
    while (!staged_.empty() && writers_->idle() > 0) {
        if (in_flight_.size() >= 2 && staged_.size() < kBusyBatch) return;
        std::vector<Staged> batch, held;
        std::unordered_set<uint64_t> in_batch, kept;
        for (Staged& st : staged_) {
            const uint64_t pid = st.stored.record.pid.value;
            if (in_batch.contains(pid) ||
                (batch.size() < max_batch_ && !in_flight_pids_.contains(pid) && !kept.contains(pid))) {
                in_batch.insert(pid);
                batch.push_back(std::move(st));
            } else {
                kept.insert(pid);
                held.push_back(std::move(st));
            }
        }
        staged_ = std::move(held);
        if (batch.empty()) return;
        const uint64_t id = ++next_write_;
        if (!writers_->submit(id, ops_of(batch))) {  // only this thread submits: idle() stays true
            staged_.insert(staged_.begin(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
            return;
        }
        for (const Staged& st : batch) ++in_flight_pids_[st.stored.record.pid.value];
        in_flight_.emplace(id, std::move(batch));
    }
}

void ResolutionService::finish(std::vector<Staged>& batch, const std::optional<std::string>& error, uint64_t write_us,
                               uint64_t now_ms) {
    const bool stored = !error;
    ++counters_.store_writes;
    counters_.store_write_us += write_us;
    if (!stored) {
        ++counters_.store_failures;
        FG_LOG(WARNING, resolve, "directory: the group's store did not take %zu change(s): %s", batch.size(),
               error->c_str());
    }
    for (Staged& st : batch) {
        const DmaAddress& r = st.change.record;
        if (stored) {
            if (st.reply) reg_reply(st.dst, st.dst_port, st.request_id, RegStatus::ok, r.pid, r.epoch);
            publish(st.change, now_ms);
            continue;
        }
        if (st.change.kind != DirectoryChange::Kind::removed) {
            // Not acknowledged, not announced: as if it had not come. The process registers again.
            dir_.forget(r.pid, r.epoch);
            if (st.reply) reg_reply(st.dst, st.dst_port, st.request_id, RegStatus::store_unavailable, r.pid, r.epoch);
        } else if (st.reply) {
            // Gone here already; the store keeps it until a member that takes it up sees no heartbeats.
            reg_reply(st.dst, st.dst_port, st.request_id, RegStatus::store_unavailable, r.pid, r.epoch);
            publish(st.change, now_ms);
        } else {
            staged_.push_back(std::move(st));  // an expiry: tried again with the next batch
        }
    }
}

std::optional<std::pair<uint64_t, std::vector<CacheRecord>>> ResolutionService::remote_cache(
    uint64_t now_ms, uint64_t unless_version) const {
    std::lock_guard lock(mu_);
    if (remote_version_ == unless_version) return std::nullopt;
    std::vector<CacheRecord> out;
    out.reserve(cache_.size(CacheKind::announced) + cache_.size(CacheKind::answered));
    cache_.for_each([&](const CacheEntry& e) {
        if ((e.kind == CacheKind::announced || e.kind == CacheKind::answered) && e.expires_ms > now_ms) {
            const uint64_t left = e.expires_ms == UINT64_MAX ? 0 : std::min<uint64_t>(e.expires_ms - now_ms, UINT32_MAX);
            out.push_back({e.key, e.record, e.owner_party, e.kind, static_cast<uint32_t>(left)});
        }
        return true;
    });
    return std::pair{remote_version_, std::move(out)};
}

std::size_t ResolutionService::warm_cache(const std::vector<CacheRecord>& records, uint64_t now_ms) {
    std::lock_guard lock(mu_);
    cache_.remove_if([](const CacheEntry& e) { return e.kind == CacheKind::announced || e.kind == CacheKind::answered; });
    std::size_t held = 0;
    for (const CacheRecord& r : records) {
        if (r.kind != CacheKind::announced && r.kind != CacheKind::answered) continue;
        const CacheEntry* old = cache_.find(r.key, 0);
        if (old != nullptr && old->kind == CacheKind::local) continue;  // never hearsay over our own
        const uint64_t expires = r.ttl_ms == 0 ? UINT64_MAX : now_ms + r.ttl_ms;
        if (cache_.upsert(r.key, r.record, r.kind, r.owner_party, expires) == ResolveCache::Upsert::full)
            ++counters_.cache_full;
        else
            ++held;
    }
    ++remote_version_;
    reclaim();
    return held;
}

void ResolutionService::warm(std::vector<StoredProcess> all, std::string version) {
    std::lock_guard lock(warm_mu_);
    warm_size_.store(all.size(), std::memory_order_relaxed);
    warm_ = std::move(all);
    warm_version_ = std::move(version);
    warm_loads_.fetch_add(1, std::memory_order_relaxed);
}

std::size_t ResolutionService::take_over(uint64_t now_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<StoredProcess> all;
    bool from_warm = false;
    if (store_ != nullptr) {
        std::optional<std::string> copy_version;
        {
            std::lock_guard wl(warm_mu_);
            all = std::move(warm_);
            warm_.clear();
            copy_version = std::move(warm_version_);
            warm_version_.reset();
            warm_size_.store(0, std::memory_order_relaxed);
        }
        from_warm = copy_version && store_->version() == *copy_version;
        if (!from_warm) all = store_->load();
    }
    FG_LOG(INFO, resolve, "directory: %zu process(es) from %s in %lld ms", all.size(),
           from_warm ? "the warm copy (the store's version unchanged)" : "the group's store",
           static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()));
    std::lock_guard lock(mu_);
    if (from_warm) ++counters_.taken_over_warm;
    std::size_t taken = 0;
    for (const StoredProcess& p : all) {
        if (!dir_.restore(p.record, p.source, now_ms)) continue;
        if (p.control_port != 0) control_ports_[p.record.pid.value] = p.control_port;
        publish({DirectoryChange::Kind::added, p.record}, now_ms);
        ++taken;
    }
    counters_.taken_over += taken;
    return taken;
}

}  // namespace fedgate
