// RoCE v2 translations: virtual QPN allocation, publication to the lcore, removal, listing.
#include "controlplane/roce_translations.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "controlplane/config.hpp"
#include "controlplane/log.hpp"
#include "proto/conn_wire.hpp"

namespace fedgate {
namespace {

bool forbidden_qpn(uint32_t q) { return q == 0 || q == 1 || q == kQpnMask; }  // QP0, QP1, multicast

}  // namespace

RoceTranslations::RoceTranslations(uint32_t capacity, std::vector<DpPortConfig> ports, Synchronize sync,
                                   std::optional<uint32_t> seed)
    : ports_(std::move(ports)), sync_(std::move(sync)) {
    const uint32_t start = seed ? *seed : std::random_device{}();
    if (capacity == 0 || capacity > kMaxRdmaMaxConnections)
        throw std::invalid_argument("rdma_max_connections must be 1.." + std::to_string(kMaxRdmaMaxConnections));
    const uint32_t size = std::max<uint32_t>(4, std::bit_ceil(capacity));
    bits_ = static_cast<uint32_t>(std::countr_zero(size));
    view_.mask = size - 1;
    for (const DpPortConfig& p : ports_) {
        if (p.role == PortRole::internal && internal_addr_ == 0) internal_addr_ = p.addr;
        if (p.role == PortRole::external && external_addr_ == 0) external_addr_ = p.addr;
    }
    for (int s = 0; s < 2; ++s) {
        Side& side = sides_[s];
        side.entries = std::make_unique<RoceEntry[]>(size);
        side.state.assign(size, Slot::free);
        side.generation.assign(size, 0);
        // Each side starts at its own generation; reserve() skips values that would be QP0, QP1 or
        // the multicast QPN. With no generation bits (16M slots) such a slot stays unused.
        const uint32_t first_gen = bits_ < 24 ? (start >> (s * 8)) & ((1u << (24 - bits_)) - 1) : 0;
        for (uint32_t slot = 0; slot < size; ++slot) {
            side.generation[slot] = first_gen;
            if (bits_ >= 24 && forbidden_qpn(slot)) {
                side.state[slot] = Slot::unusable;
                continue;
            }
            side.free.push_back(slot);
        }
        view_.side[s] = side.entries.get();
    }
}

std::optional<uint32_t> RoceTranslations::reserve(RoceSide s) {
    Side& side = sides_[static_cast<int>(s)];
    if (side.free.empty()) {
        ++counters_.exhausted;
        return std::nullopt;
    }
    const uint32_t slot = side.free.front();
    side.free.pop_front();
    uint32_t gen = side.generation[slot];
    while (forbidden_qpn(vqpn_of(slot, gen))) ++gen;
    side.generation[slot] = gen;
    side.state[slot] = Slot::reserved;
    ++counters_.reserved;
    return vqpn_of(slot, gen);
}

void RoceTranslations::release(RoceSide s, uint32_t vqpn) {
    Side& side = sides_[static_cast<int>(s)];
    const uint32_t slot = vqpn & view_.mask;
    if (side.state[slot] != Slot::reserved || vqpn_of(slot, side.generation[slot]) != vqpn) return;
    // Never published: free at once, with the next generation.
    side.state[slot] = Slot::free;
    ++side.generation[slot];
    side.free.push_back(slot);
    ++counters_.released;
}

bool RoceTranslations::fill(RoceSide s, uint32_t vqpn, uint32_t expect_src, uint32_t old_dst, uint32_t new_src,
                            uint32_t new_dst, uint32_t new_dqpn, uint32_t route_to) {
    uint32_t next_hop = 0;
    const int out = Dataplane::route(ports_, route_to, &next_hop);
    if (out < 0) return false;
    RoceEntry& e = *view_.slot(s, vqpn);
    e.expect_src = expect_src;
    e.new_src = new_src;
    e.new_dst = new_dst;
    e.new_dqpn = new_dqpn;
    e.out_port = static_cast<uint16_t>(out);
    e.next_hop = next_hop;
    roce_prepare(e, expect_src, old_dst, vqpn);
    return true;
}

bool RoceTranslations::install(const RoceConn& c, uint64_t now_ms) {
    const auto key = std::make_pair(c.initiator.value, c.conn_id);
    if (conns_.count(key) != 0) return true;  // a repeated RTU
    Side& in = sides_[static_cast<int>(RoceSide::internal)];
    Side& ex = sides_[static_cast<int>(RoceSide::external)];
    const uint32_t islot = c.internal_vqpn & view_.mask, eslot = c.external_vqpn & view_.mask;
    if (in.state[islot] != Slot::reserved || vqpn_of(islot, in.generation[islot]) != c.internal_vqpn ||
        ex.state[eslot] != Slot::reserved || vqpn_of(eslot, ex.generation[eslot]) != c.external_vqpn) {
        ++counters_.install_failed;
        return false;
    }
    const uint32_t node = htonl(c.node_addr), peer = htonl(c.peer_addr);
    // Internal side: the node's packets to us go to the peer gateway; external side: the other way.
    if (!fill(RoceSide::internal, c.internal_vqpn, node, internal_addr_, external_addr_, peer, c.peer_vqpn, peer) ||
        !fill(RoceSide::external, c.external_vqpn, peer, external_addr_, internal_addr_, node, c.node_qpn, node)) {
        release(RoceSide::internal, c.internal_vqpn);
        release(RoceSide::external, c.external_vqpn);
        ++counters_.install_failed;
        return false;
    }
    for (auto [side, vqpn] : {std::pair{&in, c.internal_vqpn}, std::pair{&ex, c.external_vqpn}}) {
        const uint32_t slot = vqpn & view_.mask;
        RoceEntry& e = side->entries[slot];
        e.packets.reset();
        e.bytes.reset();
        e.memo_tail = UINT32_MAX;
        side->state[slot] = Slot::installed;
        e.key.store(vqpn, std::memory_order_release);  // last: the lcore sees a whole entry
    }
    conns_[key] = Installed{c, now_ms, now_ms, 0};
    ++counters_.installed;
    return true;
}

void RoceTranslations::clear(RoceSide s, uint32_t vqpn) {
    Side& side = sides_[static_cast<int>(s)];
    const uint32_t slot = vqpn & view_.mask;
    if (side.state[slot] != Slot::installed) return;
    side.entries[slot].key.store(kRoceFreeKey, std::memory_order_release);
    side.state[slot] = Slot::quarantined;
    ++side.generation[slot];
    side.quarantine.push_back(slot);
}

uint64_t RoceTranslations::packets(const RoceConn& c) const {
    return view_.slot(RoceSide::internal, c.internal_vqpn)->packets.get() +
           view_.slot(RoceSide::external, c.external_vqpn)->packets.get();
}

template <typename Pred>
std::size_t RoceTranslations::remove_if(Pred pred) {
    std::size_t n = 0;
    for (auto it = conns_.begin(); it != conns_.end();) {
        if (!pred(it->second)) {
            ++it;
            continue;
        }
        const RoceConn& c = it->second.conn;
        FG_LOG(DEBUG, connect, "roce translation %s %s <-> %s removed", format_conn_id(c.conn_id).c_str(),
               format_process_id(c.local).c_str(), format_process_id(c.remote).c_str());
        clear(RoceSide::internal, c.internal_vqpn);
        clear(RoceSide::external, c.external_vqpn);
        it = conns_.erase(it);
        ++n;
    }
    return n;
}

std::size_t RoceTranslations::remove_process(ProcessId pid) {
    const std::size_t n = remove_if([&](const Installed& i) { return i.conn.local == pid || i.conn.remote == pid; });
    counters_.removed_process += n;
    return n;
}

std::size_t RoceTranslations::remove_peer(uint16_t party) {
    const std::size_t n = remove_if([&](const Installed& i) { return i.conn.peer_party == party; });
    counters_.removed_peer += n;
    return n;
}

void RoceTranslations::tick(uint64_t now_ms, uint64_t idle_ms) {
    for (auto& [k, i] : conns_) {
        const uint64_t p = packets(i.conn);
        if (p != i.seen_packets) {
            i.seen_packets = p;
            i.active_ms = now_ms;
        }
    }
    if (idle_ms != 0)
        counters_.removed_idle += remove_if([&](const Installed& i) { return now_ms >= i.active_ms + idle_ms; });
    bool waiting = false;
    for (Side& side : sides_) waiting |= !side.quarantine.empty();
    if (!waiting) return;
    sync_();  // no lcore still reads a cleared entry: their slots may be handed out again
    for (Side& side : sides_) {
        for (const uint32_t slot : side.quarantine) {
            side.state[slot] = Slot::free;
            side.free.push_back(slot);
        }
        side.quarantine.clear();
    }
}

nlohmann::ordered_json RoceTranslations::list(std::size_t limit, uint64_t now_ms) const {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& [k, i] : conns_) {
        if (out.size() >= limit) break;
        const RoceConn& c = i.conn;
        const RoceEntry& to_peer = *view_.slot(RoceSide::internal, c.internal_vqpn);
        const RoceEntry& from_peer = *view_.slot(RoceSide::external, c.external_vqpn);
        out.push_back({{"conn_id", format_conn_id(c.conn_id)},
                       {"local", format_process_id(c.local)},
                       {"remote", format_process_id(c.remote)},
                       {"peer_party", c.peer_party},
                       {"node", format_ipv4(c.node_addr)},
                       {"node_qpn", c.node_qpn},
                       {"internal_vqpn", c.internal_vqpn},
                       {"external_vqpn", c.external_vqpn},
                       {"peer", format_ipv4(c.peer_addr)},
                       {"peer_vqpn", c.peer_vqpn},
                       {"to_peer", {{"packets", to_peer.packets.get()}, {"bytes", to_peer.bytes.get()}}},
                       {"from_peer", {{"packets", from_peer.packets.get()}, {"bytes", from_peer.bytes.get()}}},
                       {"idle_ms", now_ms > i.active_ms ? now_ms - i.active_ms : 0}});
    }
    return out;
}

nlohmann::ordered_json RoceTranslations::stats() const {
    const RoceCounters& c = counters_;
    return {{"connections", conns_.size()},   {"capacity", capacity()},
            {"free_internal", sides_[0].free.size()}, {"free_external", sides_[1].free.size()},
            {"reserved", c.reserved},          {"released", c.released},
            {"installed", c.installed},        {"exhausted", c.exhausted},
            {"install_failed", c.install_failed}, {"removed_process", c.removed_process},
            {"removed_peer", c.removed_peer},  {"removed_idle", c.removed_idle}};
}

}  // namespace fedgate
