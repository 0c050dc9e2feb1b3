// The handshake relay: checks, idempotent forwarding, tcp endpoint rewriting, expiry, listing.
#include "controlplane/handshake_relay.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <vector>

#include "controlplane/log.hpp"

namespace fedgate {
namespace {

// The RDMA fields of `from` (QPN, PSN, MTU, GID, receive ring) into `to`.
void put_rdma_fields(const ConnParams& from, ConnParams& to) {
    to.qpn = from.qpn;
    to.psn = from.psn;
    to.mtu = from.mtu;
    to.gid = from.gid;
    to.rkey = from.rkey;
    to.raddr = from.raddr;
    to.rlen = from.rlen;
}

}  // namespace

const char* relay_stage_name(RelayStage s) {
    switch (s) {
    case RelayStage::req_relayed: return "req_relayed";
    case RelayStage::rep_relayed: return "rep_relayed";
    case RelayStage::established: return "established";
    case RelayStage::refused: return "refused";
    case RelayStage::timed_out: return "timed_out";
    }
    return "?";
}

HandshakeRelay::HandshakeRelay(uint16_t party_id, const ConnectSettings& settings, RelayIo& io)
    : party_(party_id), settings_(settings), io_(io) {}

void HandshakeRelay::on_client(MsgType type, Endpoint4 src, const ConnParams& p, uint64_t now_ms) {
    switch (type) {
    case MsgType::conn_req: return client_req(src, p, now_ms);
    case MsgType::conn_rep: return client_rep(src, p, now_ms);
    case MsgType::conn_rtu: return client_rtu(src, p, now_ms);
    default: ++counters_.wrong_sender; return;
    }
}

void HandshakeRelay::on_peer(MsgType type, uint16_t party, const ConnParams& p, uint64_t now_ms) {
    switch (type) {
    case MsgType::hs_req: return peer_req(party, p, now_ms);
    case MsgType::hs_rep: return peer_rep(party, p, now_ms);
    case MsgType::hs_rtu: return peer_rtu(party, p, now_ms);
    default: ++counters_.wrong_sender; return;
    }
}

HandshakeRelay::Entry* HandshakeRelay::find(const ConnParams& p) {
    const auto it = table_.find({p.initiator.value, p.conn_id});
    return it == table_.end() ? nullptr : &it->second;
}

HandshakeRelay::Entry* HandshakeRelay::find_live(const ConnParams& p) {
    const auto it = table_.find({p.initiator.value, p.conn_id});
    if (it == table_.end()) return nullptr;
    if (it->second.stage != RelayStage::timed_out) return &it->second;
    // Timed out: its virtual QPNs went back then and may be another connection's by now, so what it
    // holds must not be sent again. A retried REQ starts over, with fresh ones.
    table_.erase(it);
    return nullptr;
}

HandshakeRelay::Entry* HandshakeRelay::insert(Role role, const ConnParams& p, uint64_t now_ms) {
    if (table_.size() >= settings_.max_handshakes) return nullptr;
    Entry& e = table_[{p.initiator.value, p.conn_id}];
    e.role = role;
    e.req = p;
    e.created_ms = e.updated_ms = now_ms;
    return &e;
}

ConnParams HandshakeRelay::refusal(const ConnParams& req, ConnStatus why) { return conn_refusal(req, why); }

void HandshakeRelay::count_refused(ConnStatus s) { count_conn_status(counters_.refused, s); }

// A refused handshake stays listed (if there is room) so that `conn list` shows why it failed.
void HandshakeRelay::record_refusal(Role role, const ConnParams& req, uint16_t peer, Endpoint4 initiator,
                                    const ConnParams& rep, uint64_t now_ms) {
    count_refused(rep.status);
    FG_LOG(DEBUG, connect, "handshake %s %s -> %s refused here: %s", format_conn_id(req.conn_id).c_str(),
           format_process_id(req.initiator).c_str(), format_process_id(req.target).c_str(), conn_status_name(rep.status));
    if (find(req) != nullptr) return;
    if (Entry* e = insert(role, req, now_ms); e != nullptr) {
        e->peer = peer;
        e->initiator = initiator;
        e->rep = rep;
        e->stage = RelayStage::refused;
    }
}

void HandshakeRelay::refuse_to_process(Endpoint4 src, const ConnParams& req, ConnStatus why, uint64_t now_ms) {
    const ConnParams rep = refusal(req, why);
    io_.to_process(src, MsgType::conn_rep, rep);
    record_refusal(Role::outbound, req, req.target.party(), src, rep, now_ms);
}

void HandshakeRelay::refuse_to_peer(uint16_t party, const ConnParams& req, ConnStatus why, uint64_t now_ms) {
    const ConnParams rep = refusal(req, why);
    io_.to_peer(party, MsgType::hs_rep, rep);
    record_refusal(Role::inbound, req, party, {}, rep, now_ms);
}

// ---------------------------------------------------------------------------------------------
// REQ.

void HandshakeRelay::client_req(Endpoint4 src, const ConnParams& p, uint64_t now_ms) {
    if (p.initiator.party() != party_) return refuse_to_process(src, p, ConnStatus::unknown_initiator, now_ms);
    const auto self = io_.control_endpoint(p.initiator);
    if (!self || self->addr != src.addr) return refuse_to_process(src, p, ConnStatus::unknown_initiator, now_ms);
    if (p.target.party() == 0 || p.target == p.initiator || p.status != ConnStatus::ok)
        return refuse_to_process(src, p, ConnStatus::bad_request, now_ms);

    if (Entry* e = find_live(p); e != nullptr) {
        ++counters_.duplicates;
        e->initiator = src;
        e->updated_ms = now_ms;
        if (e->rep) return io_.to_process(src, MsgType::conn_rep, *e->rep);  // the REP was lost on its way
        if (e->role == Role::local) {
            if (const auto t = io_.control_endpoint(p.target)) io_.to_process(*t, MsgType::conn_req, e->req);
            return;
        }
        return io_.to_peer(e->peer, MsgType::hs_req, e->req);
    }

    const bool local = p.target.party() == party_;
    std::optional<Endpoint4> target;
    if (local) {
        target = io_.control_endpoint(p.target);
        if (!target) return refuse_to_process(src, p, ConnStatus::unknown_target, now_ms);
    } else if (!io_.has_peer(p.target.party())) {
        return refuse_to_process(src, p, ConnStatus::no_peer, now_ms);
    }
    Entry* e = insert(local ? Role::local : Role::outbound, p, now_ms);
    if (e == nullptr) return refuse_to_process(src, p, ConnStatus::busy, now_ms);
    e->initiator = src;
    e->peer = local ? 0 : p.target.party();
    if (local) {
        ++counters_.req_relayed;
        return io_.to_process(*target, MsgType::conn_req, p);
    }
    ConnParams out = p;
    if (const ConnStatus s = translate_req_out(*e, out); s != ConnStatus::ok) {
        table_.erase({p.initiator.value, p.conn_id});
        return refuse_to_process(src, p, s, now_ms);
    }
    e->req = out;
    ++counters_.req_relayed;
    io_.to_peer(e->peer, MsgType::hs_req, out);
}

void HandshakeRelay::peer_req(uint16_t party, const ConnParams& p, uint64_t now_ms) {
    // A peer speaks for its own processes, and to ours.
    if (p.initiator.party() != party || p.target.party() != party_ || p.status != ConnStatus::ok)
        return refuse_to_peer(party, p, ConnStatus::wrong_party, now_ms);
    if (Entry* e = find_live(p); e != nullptr) {
        if (e->role != Role::inbound || e->peer != party) {
            ++counters_.wrong_sender;
            return;
        }
        ++counters_.duplicates;
        e->updated_ms = now_ms;
        if (e->rep) return io_.to_peer(party, MsgType::hs_rep, *e->rep);
        if (const auto t = io_.control_endpoint(p.target)) io_.to_process(*t, MsgType::conn_req, e->req);
        return;
    }
    const auto target = io_.control_endpoint(p.target);
    if (!target) return refuse_to_peer(party, p, ConnStatus::unknown_target, now_ms);
    Entry* e = insert(Role::inbound, p, now_ms);
    if (e == nullptr) return refuse_to_peer(party, p, ConnStatus::busy, now_ms);
    e->peer = party;
    ConnParams out = p;
    if (const ConnStatus s = translate_req_in(*e, out); s != ConnStatus::ok) {
        table_.erase({p.initiator.value, p.conn_id});
        return refuse_to_peer(party, p, s, now_ms);
    }
    e->req = out;
    ++counters_.req_relayed;
    io_.to_process(*target, MsgType::conn_req, out);
}

// ---------------------------------------------------------------------------------------------
// RDMA translation: every packet a node sends goes to its own gateway (vQPNs of our internal
// side), between the gateways external to external (vQPNs of the receiving external side).

uint16_t HandshakeRelay::clamp_mtu(uint16_t mtu) {
    const uint16_t limit = io_.rdma_mtu_limit();
    return mtu == 0 || limit == 0 ? mtu : std::min(mtu, limit);
}

ConnStatus HandshakeRelay::translate_req_out(Entry& e, ConnParams& out) {
    if ((out.caps & kCapRdma) == 0) return ConnStatus::ok;
    const auto node = gid_ipv4(out.gid);
    if (!node || out.qpn == 0) {
        // Not an IPv4 RoCE v2 GID: nothing the gateways can route. Offer tcp only, if the initiator can.
        ++counters_.rdma_unmapped_gid;
        if ((out.caps & kCapTcp) == 0) return ConnStatus::bad_request;
        out.caps = kCapTcp;
        out.qpn = out.psn = out.mtu = 0;
        out.gid = {};
        return ConnStatus::ok;
    }
    const auto ext = io_.roce_reserve(RoceSide::external);
    if (!ext) return ConnStatus::no_mapping;
    e.roce.on = true;
    e.roce.node_addr = *node;
    e.roce.node_qpn = out.qpn;
    e.roce.external_vqpn = ext;
    out.qpn = *ext;
    out.gid = ipv4_gid(io_.own_address(RoceSide::external));
    out.mtu = clamp_mtu(out.mtu);
    return ConnStatus::ok;
}

ConnStatus HandshakeRelay::translate_req_in(Entry& e, ConnParams& out) {
    if ((out.caps & kCapRdma) == 0) return ConnStatus::ok;
    // The peer gateway names itself: its external address and a vQPN of its external side.
    const uint32_t peer = io_.peer_address(e.peer);
    const auto g = gid_ipv4(out.gid);
    if (peer == 0 || !g || *g != peer || out.qpn == 0) return ConnStatus::bad_request;
    const auto in = io_.roce_reserve(RoceSide::internal);
    if (!in) return ConnStatus::no_mapping;
    e.roce.on = true;
    e.roce.peer_vqpn = out.qpn;
    e.roce.internal_vqpn = in;
    out.qpn = *in;
    out.gid = ipv4_gid(io_.own_address(RoceSide::internal));
    out.mtu = clamp_mtu(out.mtu);
    return ConnStatus::ok;
}

ConnStatus HandshakeRelay::translate_rep(Entry& e, const ConnParams& rep, ConnParams& out) {
    if (!e.roce.on) return ConnStatus::bad_request;  // RDMA chosen though this gateway did not offer it
    const auto g = gid_ipv4(rep.gid);
    if (!g || rep.qpn == 0) return ConnStatus::bad_request;
    out = rep;
    if (e.role == Role::inbound) {
        // Our target answered: its packets come to our internal side, the peer's to our external.
        const auto ext = io_.roce_reserve(RoceSide::external);
        if (!ext) return ConnStatus::no_mapping;
        e.roce.node_addr = *g;
        e.roce.node_qpn = rep.qpn;
        e.roce.external_vqpn = ext;
        out.qpn = *ext;
        out.gid = ipv4_gid(io_.own_address(RoceSide::external));
    } else {
        if (*g != io_.peer_address(e.peer)) return ConnStatus::bad_request;
        const auto in = io_.roce_reserve(RoceSide::internal);
        if (!in) return ConnStatus::no_mapping;
        e.roce.peer_vqpn = rep.qpn;
        e.roce.internal_vqpn = in;
        out.qpn = *in;
        out.gid = ipv4_gid(io_.own_address(RoceSide::internal));
    }
    out.mtu = clamp_mtu(rep.mtu);
    return ConnStatus::ok;
}

void HandshakeRelay::release_roce(Entry& e) {
    if (e.roce.installed) return;
    if (e.roce.internal_vqpn) io_.roce_release(RoceSide::internal, *e.roce.internal_vqpn);
    if (e.roce.external_vqpn) io_.roce_release(RoceSide::external, *e.roce.external_vqpn);
    e.roce.internal_vqpn.reset();
    e.roce.external_vqpn.reset();
    e.roce.on = false;
}

void HandshakeRelay::install_roce(Entry& e, uint64_t now_ms) {
    if (!e.roce.on || e.roce.installed || !e.roce.internal_vqpn || !e.roce.external_vqpn || !e.rep ||
        e.rep->caps != kCapRdma)
        return;
    RoceConn c;
    c.conn_id = e.req.conn_id;
    c.initiator = e.req.initiator;
    c.target = e.req.target;
    c.local = e.role == Role::outbound ? e.req.initiator : e.req.target;
    c.remote = e.role == Role::outbound ? e.req.target : e.req.initiator;
    c.peer_party = e.peer;
    c.node_addr = e.roce.node_addr;
    c.node_qpn = e.roce.node_qpn;
    c.peer_addr = io_.peer_address(e.peer);
    c.peer_vqpn = e.roce.peer_vqpn;
    c.internal_vqpn = *e.roce.internal_vqpn;
    c.external_vqpn = *e.roce.external_vqpn;
    if (io_.roce_install(c)) {
        e.roce.installed = true;
        ++counters_.rdma_translated;
        FG_LOG(DEBUG, connect, "handshake %s: RoCE translation installed (internal vQPN %u, external vQPN %u)",
               format_conn_id(c.conn_id).c_str(), c.internal_vqpn, c.external_vqpn);
        return;
    }
    // Its vQPNs went back with the failure; the connection will see no packets.
    e.roce.internal_vqpn.reset();
    e.roce.external_vqpn.reset();
    e.roce.on = false;
    (void)now_ms;
}

ConnParams HandshakeRelay::rtu_as_sent(const Entry& e, const ConnParams& rtu) {
    if (!e.roce.on && !e.roce.installed) return rtu;
    ConnParams out = rtu;
    put_rdma_fields(e.req, out);
    return out;
}

// ---------------------------------------------------------------------------------------------
// REP.

ConnParams HandshakeRelay::outgoing_rep(Entry& e, const ConnParams& rep) {
    ConnParams out = rep;
    if (e.role == Role::local) return out;
    if (rep.status == ConnStatus::ok && rep.caps == kCapRdma) {
        const ConnStatus s = translate_rep(e, rep, out);
        if (s == ConnStatus::ok) return out;
        release_roce(e);
        return refusal(e.req, s);
    }
    release_roce(e);  // refused, or tcp chosen: the vQPNs go back
    if (rep.status != ConnStatus::ok || rep.caps != kCapTcp) return out;
    // Inbound: the target's private endpoint means nothing to the other party; hand out the
    // external port it is exported on.
    const auto ext = io_.exported_endpoint(e.req.target);
    if (!ext) return refusal(e.req, ConnStatus::no_mapping);
    out.ipv4 = ext->addr;
    out.port = ext->port;
    return out;
}

void HandshakeRelay::client_rep(Endpoint4 src, const ConnParams& p, uint64_t now_ms) {
    Entry* e = find(p);
    if (e == nullptr || e->role == Role::outbound || e->req.target != p.target) {
        ++counters_.unknown_handshake;
        return;
    }
    const auto self = io_.control_endpoint(p.target);
    if (!self || self->addr != src.addr) {
        ++counters_.wrong_sender;
        return;
    }
    e->updated_ms = now_ms;
    if (e->rep) {
        ++counters_.duplicates;
    } else {
        ConnParams rep = p;
        if (rep.status == ConnStatus::ok && std::popcount(rep.caps) != 1) rep = refusal(e->req, ConnStatus::bad_request);
        e->rep = outgoing_rep(*e, rep);
        e->stage = e->rep->status == ConnStatus::ok ? RelayStage::rep_relayed : RelayStage::refused;
        if (e->rep->status != ConnStatus::ok) count_refused(e->rep->status);
        ++counters_.rep_relayed;
    }
    if (e->role == Role::local) return io_.to_process(e->initiator, MsgType::conn_rep, *e->rep);
    io_.to_peer(e->peer, MsgType::hs_rep, *e->rep);
}

void HandshakeRelay::peer_rep(uint16_t party, const ConnParams& p, uint64_t now_ms) {
    Entry* e = find(p);
    if (e == nullptr || e->role != Role::outbound || e->peer != party || e->req.target != p.target) {
        ++counters_.unknown_handshake;
        return;
    }
    e->updated_ms = now_ms;
    if (e->rep) {
        ++counters_.duplicates;
        return io_.to_process(e->initiator, MsgType::conn_rep, *e->rep);
    }
    ConnParams rep = p;
    if (rep.status == ConnStatus::ok && std::popcount(rep.caps) != 1) rep = refusal(e->req, ConnStatus::bad_request);
    if (rep.status == ConnStatus::ok && rep.caps == kCapRdma) {
        ConnParams out;
        const ConnStatus s = translate_rep(*e, rep, out);
        rep = s == ConnStatus::ok ? out : refusal(e->req, s);
    }
    if (rep.status != ConnStatus::ok || rep.caps != kCapRdma) release_roce(*e);
    if (rep.status == ConnStatus::ok && rep.caps == kCapTcp) {
        // Outbound: the peer handed out its external address and exported port; our initiator
        // reaches that through a port imported on our internal address.
        const auto in = io_.imported_endpoint(party, rep.port, e->req.target, e->req.initiator);
        if (in) {
            rep.ipv4 = in->addr;
            rep.port = in->port;
        } else {
            rep = refusal(e->req, ConnStatus::no_mapping);
        }
    }
    e->rep = rep;
    e->stage = rep.status == ConnStatus::ok ? RelayStage::rep_relayed : RelayStage::refused;
    if (rep.status != ConnStatus::ok) count_refused(rep.status);
    ++counters_.rep_relayed;
    io_.to_process(e->initiator, MsgType::conn_rep, rep);
}

// ---------------------------------------------------------------------------------------------
// RTU.

void HandshakeRelay::client_rtu(Endpoint4 src, const ConnParams& p, uint64_t now_ms) {
    Entry* e = find(p);
    if (e == nullptr || e->role == Role::inbound || !e->rep || e->rep->status != ConnStatus::ok) {
        ++counters_.unknown_handshake;
        return;
    }
    if (src.addr != e->initiator.addr) {
        ++counters_.wrong_sender;
        return;
    }
    e->updated_ms = now_ms;
    if (e->stage != RelayStage::established) {
        ++counters_.established;
        FG_LOG(DEBUG, connect, "handshake %s %s -> %s established (%s)", format_conn_id(p.conn_id).c_str(),
               format_process_id(p.initiator).c_str(), format_process_id(p.target).c_str(),
               e->rep->caps == kCapRdma ? "roce_v2" : "tcp");
    }
    e->stage = RelayStage::established;
    ++counters_.rtu_relayed;
    if (e->role == Role::local) {
        if (const auto t = io_.control_endpoint(p.target)) io_.to_process(*t, MsgType::conn_rtu, p);
        return;
    }
    install_roce(*e, now_ms);
    io_.to_peer(e->peer, MsgType::hs_rtu, rtu_as_sent(*e, p));
}

void HandshakeRelay::peer_rtu(uint16_t party, const ConnParams& p, uint64_t now_ms) {
    Entry* e = find(p);
    if (e == nullptr || e->role != Role::inbound || e->peer != party || !e->rep || e->rep->status != ConnStatus::ok) {
        ++counters_.unknown_handshake;
        return;
    }
    e->updated_ms = now_ms;
    if (e->stage != RelayStage::established) ++counters_.established;
    e->stage = RelayStage::established;
    ++counters_.rtu_relayed;
    install_roce(*e, now_ms);
    if (const auto t = io_.control_endpoint(p.target)) io_.to_process(*t, MsgType::conn_rtu, rtu_as_sent(*e, p));
}

// ---------------------------------------------------------------------------------------------
// Expiry and listing.

void HandshakeRelay::expire(uint64_t now_ms) {
    const uint64_t t = settings_.handshake_timeout_ms;
    for (auto it = table_.begin(); it != table_.end();) {
        Entry& e = it->second;
        const bool in_flight = e.stage == RelayStage::req_relayed || e.stage == RelayStage::rep_relayed;
        if (in_flight && now_ms >= e.created_ms + t) {
            e.stage = RelayStage::timed_out;
            e.updated_ms = now_ms;
            ++counters_.timed_out;
            release_roce(e);
        } else if (!in_flight && now_ms >= e.updated_ms + t) {
            release_roce(e);
            it = table_.erase(it);
            continue;
        }
        ++it;
    }
}

nlohmann::ordered_json HandshakeRelay::list(std::size_t limit, uint64_t now_ms) const {
    std::vector<const Entry*> all;
    all.reserve(table_.size());
    for (const auto& [k, e] : table_) all.push_back(&e);
    std::sort(all.begin(), all.end(), [](const Entry* a, const Entry* b) { return a->created_ms > b->created_ms; });
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const Entry* e : all) {
        if (out.size() >= limit) break;
        const char* role = e->role == Role::outbound ? "outbound" : e->role == Role::inbound ? "inbound" : "local";
        const ConnStatus status = e->rep ? e->rep->status : ConnStatus::ok;
        const char* transport = !e->rep || e->rep->status != ConnStatus::ok ? ""
                                : e->rep->caps == kCapRdma                   ? "roce_v2"
                                                                             : "tcp";
        out.push_back({{"conn_id", format_conn_id(e->req.conn_id)},
                       {"initiator", format_process_id(e->req.initiator)},
                       {"target", format_process_id(e->req.target)},
                       {"role", role},
                       {"peer_party", e->peer},
                       {"stage", relay_stage_name(e->stage)},
                       {"status", conn_status_name(status)},
                       {"transport", transport},
                       {"age_ms", now_ms > e->created_ms ? now_ms - e->created_ms : 0}});
    }
    return {{"total", table_.size()}, {"shown", out.size()}, {"handshakes", out}};
}

nlohmann::ordered_json HandshakeRelay::stats() const {
    const RelayCounters& c = counters_;
    nlohmann::ordered_json refused = nlohmann::ordered_json::object();
    for (std::size_t i = 1; i < c.refused.size(); ++i)
        refused[conn_status_name(static_cast<ConnStatus>(i))] = c.refused[i];
    std::size_t in_flight = 0;
    for (const auto& [k, e] : table_)
        in_flight += e.stage == RelayStage::req_relayed || e.stage == RelayStage::rep_relayed;
    return {{"in_table", table_.size()},  {"in_flight", in_flight},       {"req_relayed", c.req_relayed},
            {"rep_relayed", c.rep_relayed}, {"rtu_relayed", c.rtu_relayed}, {"established", c.established},
            {"duplicates", c.duplicates},  {"timed_out", c.timed_out},    {"unknown_handshake", c.unknown_handshake},
            {"wrong_sender", c.wrong_sender}, {"rdma_translated", c.rdma_translated},
            {"rdma_unmapped_gid", c.rdma_unmapped_gid}, {"refused", refused}};
}

}  // namespace fedgate
