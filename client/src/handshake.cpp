// The handshake state machines: REQ retransmission, REP checks and saving, RTU, expiry.
#include "fedgate/handshake.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace fedgate {
namespace {

// Retries double the wait; past this it stops growing.
constexpr uint64_t kMaxTryMs = 60'000;

std::string explain(ConnStatus s, ProcessId target) {
    const std::string t = format_process_id(target);
    switch (s) {
    case ConnStatus::unknown_initiator:
        return "the gateway does not know this process at this address (is it registered?)";
    case ConnStatus::unknown_target: return t + " is not registered with its gateway";
    case ConnStatus::not_listening: return t + " accepts no connections";
    case ConnStatus::transport_mismatch: return t + " shares no transport with this process";
    case ConnStatus::no_peer: return "the gateway has no peer for party " + std::to_string(target.party());
    case ConnStatus::busy: return "a handshake table or " + t + "'s accept queue is full";
    case ConnStatus::no_mapping: return "a gateway could not set up the tcp port mapping";
    case ConnStatus::bad_request: return "the request was malformed";
    case ConnStatus::wrong_party: return "a gateway relayed it for processes not of its party";
    case ConnStatus::ok: break;
    }
    return "";
}

void count_status(std::array<uint64_t, 10>& by_status, ConnStatus s) { count_conn_status(by_status, s); }

ConnParams refusal(const ConnParams& req, ConnStatus why) { return conn_refusal(req, why); }

}  // namespace

const char* conn_stage_name(ConnStage s) {
    switch (s) {
    case ConnStage::resolve: return "resolve";
    case ConnStage::req: return "req";
    case ConnStage::rep: return "rep";
    case ConnStage::refused: return "refused";
    case ConnStage::transport: return "transport";
    case ConnStage::rtr: return "rtr";
    case ConnStage::rts: return "rts";
    case ConnStage::data: return "data";
    case ConnStage::open: return "open";
    }
    return "?";
}

Error::Error(ConnStage stage, const std::string& why)
    : std::runtime_error(std::string("stage ") + conn_stage_name(stage) + ": " + why), stage_(stage), why_(why) {}

ConnStage stage_of_refusal(ConnStatus s) {
    switch (s) {
    case ConnStatus::unknown_initiator:
    case ConnStatus::no_peer:
    case ConnStatus::bad_request: return ConnStage::req;
    case ConnStatus::transport_mismatch: return ConnStage::transport;
    default: return ConnStage::refused;
    }
}

RdmaQpParams rdma_params_of(const ConnParams& p) {
    return {p.qpn, p.psn, p.mtu, p.gid, p.rkey, p.raddr, p.rlen};
}

void put_rdma_params(const RdmaQpParams& q, ConnParams& p) {
    p.qpn = q.qpn;
    p.psn = q.psn;
    p.mtu = q.mtu;
    p.gid = q.gid;
    p.rkey = q.rkey;
    p.raddr = q.raddr;
    p.rlen = q.rlen;
}

RdmaPath rdma_path(const RdmaQpParams& local, const RdmaQpParams& remote) {
    return {remote, remote.psn, local.psn, negotiate_mtu(local.mtu, remote.mtu)};
}

uint32_t random_psn(std::mt19937_64& rng) { return static_cast<uint32_t>(rng() & kMaxPsn); }

// ---------------------------------------------------------------------------------------------
// ActiveHandshake.

ActiveHandshake::ActiveHandshake(const ConnParams& req, uint64_t try_timeout_ms, int tries)
    : req_(req), try_timeout_ms_(std::max<uint64_t>(try_timeout_ms, 1)), tries_(tries) {
    if (tries < 1) throw std::invalid_argument("ActiveHandshake: tries must be at least 1");
}

ConnParams ActiveHandshake::start(uint64_t now_ms) {
    state_ = State::waiting_rep;
    sent_ = 1;
    wait_ms_ = try_timeout_ms_;
    deadline_ms_ = now_ms + wait_ms_;
    ++counters_.reqs_sent;
    return req_;
}

std::optional<ConnParams> ActiveHandshake::on_timer(uint64_t now_ms) {
    if (state_ != State::waiting_rep || now_ms < deadline_ms_) return std::nullopt;
    if (sent_ >= tries_) {
        fail(ConnStage::rep, "no REP from " + format_process_id(req_.target) + " after " + std::to_string(sent_) +
                                 (sent_ == 1 ? " try" : " tries"));
        return std::nullopt;
    }
    ++sent_;
    wait_ms_ = std::min(wait_ms_ * 2, kMaxTryMs);
    deadline_ms_ = now_ms + wait_ms_;
    ++counters_.reqs_sent;
    ++counters_.req_retransmits;
    return req_;
}

// Why an ok REP cannot be used, or nothing.
std::optional<std::string> ActiveHandshake::check_rep(const ConnParams& rep) const {
    if (std::popcount(rep.caps) != 1 || (rep.caps & req_.caps) == 0)
        return "the REP chose transport caps " + std::to_string(rep.caps) + ", which the REQ (caps " +
               std::to_string(req_.caps) + ") did not offer";
    if (rep.caps == kCapRdma && !valid_rdma_mtu(rep.mtu))
        return "the REP carries RDMA MTU " + std::to_string(rep.mtu) + ", not 256..4096";
    if (rep.caps == kCapTcp && (rep.ipv4 == 0 || rep.port == 0)) return "the REP carries no tcp address";
    return std::nullopt;
}

std::optional<ConnParams> ActiveHandshake::on_rep(const ConnParams& rep) {
    if (rep.conn_id != req_.conn_id || rep.initiator != req_.initiator || rep.target != req_.target) {
        ++counters_.ignored_reps;
        return std::nullopt;
    }
    switch (state_) {
    case State::waiting_rep: break;
    case State::rep_received: ++counters_.duplicate_reps; return std::nullopt;
    case State::done:
        ++counters_.duplicate_reps;
        ++counters_.rtus_sent;
        return rtu();
    case State::idle:
    case State::failed: ++counters_.ignored_reps; return std::nullopt;
    }
    ++counters_.reps;
    if (rep.status != ConnStatus::ok) {
        fail(stage_of_refusal(rep.status), std::string(conn_status_name(rep.status)) + " (" +
                                               explain(rep.status, req_.target) + ")");
        return std::nullopt;
    }
    if (const auto why = check_rep(rep)) {
        fail((rep.caps & req_.caps) == 0 ? ConnStage::transport : ConnStage::rep, *why);
        return std::nullopt;
    }
    rep_ = rep;
    state_ = State::rep_received;
    return std::nullopt;
}

ConnParams ActiveHandshake::complete() {
    state_ = State::done;
    ++counters_.rtus_sent;
    return rtu();
}

void ActiveHandshake::fail(ConnStage stage, std::string message) {
    state_ = State::failed;
    failure_ = {stage, std::move(message)};
}

ConnParams ActiveHandshake::rtu() const { return req_; }

// ---------------------------------------------------------------------------------------------
// PassiveHandshakes.

PassiveHandshakes::PassiveHandshakes(ProcessId self, uint64_t timeout_ms, std::size_t max_entries)
    : self_(self), timeout_ms_(timeout_ms), max_entries_(max_entries) {}

std::optional<ConnParams> PassiveHandshakes::repeat(const ConnParams& req) {
    const auto it = table_.find({req.initiator.value, req.conn_id});
    if (it == table_.end()) return std::nullopt;
    ++counters_.duplicate_reqs;
    return it->second.rep;
}

ConnParams PassiveHandshakes::decide(const ConnParams& req, const PassiveOffer& offer) const {
    if (req.target != self_ || req.status != ConnStatus::ok) return refusal(req, ConnStatus::bad_request);
    if (!offer.listening) return refusal(req, ConnStatus::not_listening);
    uint8_t theirs = req.caps;
    if (!valid_rdma_mtu(req.mtu)) theirs &= static_cast<uint8_t>(~kCapRdma);
    uint8_t ours = offer.caps;
    if (!offer.rdma) ours &= static_cast<uint8_t>(~kCapRdma);
    const auto chosen = choose_transport(theirs, ours);
    if (!chosen) return refusal(req, ConnStatus::transport_mismatch);
    if (offer.backlog_full || table_.size() >= max_entries_) return refusal(req, ConnStatus::busy);
    ConnParams rep = req;
    put_rdma_params({}, rep);
    rep.ipv4 = 0;
    rep.port = 0;
    rep.caps = transport_cap(*chosen);
    if (*chosen == Transport::roce_v2) {
        put_rdma_params(*offer.rdma, rep);
    } else {
        rep.ipv4 = offer.tcp_ipv4;
        rep.port = offer.tcp_port;
    }
    return rep;
}

void PassiveHandshakes::make_room() {
    if (table_.size() < max_entries_) return;
    for (auto it = table_.begin(); it != table_.end();) {
        if (it->second.state == State::established || it->second.state == State::refused) {
            it = table_.erase(it);
            ++counters_.finished_evicted;
        } else {
            ++it;
        }
    }
}

ConnParams PassiveHandshakes::on_req(const ConnParams& req, const PassiveOffer& offer, uint64_t now_ms) {
    ++counters_.reqs;
    make_room();
    const ConnParams rep = decide(req, offer);
    if (rep.status == ConnStatus::ok)
        ++counters_.accepted;
    else
        count_status(counters_.refused, rep.status);
    if (table_.size() >= max_entries_) {  // answered busy; no room to save that either
        ++counters_.table_full;
        return rep;
    }
    table_[{req.initiator.value, req.conn_id}] =
        Entry{req, rep, rep.status == ConnStatus::ok ? State::half_open : State::refused, now_ms};
    return rep;
}

PassiveHandshakes::RtuResult PassiveHandshakes::on_rtu(const ConnParams& rtu) {
    const auto it = table_.find({rtu.initiator.value, rtu.conn_id});
    if (it == table_.end() || it->second.state != State::half_open || it->second.req.target != rtu.target) {
        ++counters_.late_rtus;
        return RtuResult::late;
    }
    Entry& e = it->second;
    if (e.rep.caps == kCapTcp) {
        e.state = State::rtu_seen;
        return RtuResult::awaiting_preamble;
    }
    e.state = State::established;
    ++counters_.established_by_rtu;
    return RtuResult::established;
}

const PassiveHandshakes::Entry* PassiveHandshakes::on_preamble(uint64_t conn_id, ProcessId initiator,
                                                               ProcessId target) {
    const auto it = table_.find({initiator.value, conn_id});
    const bool waiting = it != table_.end() && (it->second.state == State::half_open || it->second.state == State::rtu_seen);
    if (!waiting || it->second.rep.caps != kCapTcp || it->second.req.target != target) {
        ++counters_.unknown_preambles;
        return nullptr;
    }
    Entry& e = it->second;
    ++(e.state == State::rtu_seen ? counters_.established_by_rtu : counters_.established_by_preamble);
    e.state = State::established;
    return &e;
}

std::vector<PassiveHandshakes::Key> PassiveHandshakes::expire(uint64_t now_ms) {
    std::vector<Key> dropped;
    for (auto it = table_.begin(); it != table_.end();) {
        const Entry& e = it->second;
        if (now_ms < e.created_ms + timeout_ms_) {
            ++it;
            continue;
        }
        if (e.state == State::half_open || e.state == State::rtu_seen) {
            ++counters_.half_open_dropped;
            dropped.push_back(it->first);
        }
        it = table_.erase(it);
    }
    return dropped;
}

std::optional<uint64_t> PassiveHandshakes::next_expiry() const {
    std::optional<uint64_t> next;
    for (const auto& [key, e] : table_)
        if (!next || e.created_ms + timeout_ms_ < *next) next = e.created_ms + timeout_ms_;
    return next;
}

std::size_t PassiveHandshakes::half_open() const {
    return static_cast<std::size_t>(std::count_if(table_.begin(), table_.end(), [](const auto& kv) {
        return kv.second.state == State::half_open || kv.second.state == State::rtu_seen;
    }));
}

}  // namespace fedgate
