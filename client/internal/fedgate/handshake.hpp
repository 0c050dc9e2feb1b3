// The compute process's side of the connection handshake (conn_wire.hpp) as pure state machines:
// time is passed in (milliseconds on any monotonic clock), nothing here touches a socket, so tests
// drive every loss and timeout exactly. Endpoint (endpoint.hpp) does the I/O around them.
//
//   ActiveHandshake     the initiator: REQ, retransmitted with a doubling timeout until a REP comes;
//                       then (after its QP is ready, for RDMA) RTU, sent again for a duplicate REP.
//   PassiveHandshakes   the target: one entry per (initiator, conn_id); a new REQ gets a REP that is
//                       saved and repeated for duplicates; RTU (or the tcp preamble) establishes it;
//                       half-open entries expire.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proto/conn_wire.hpp"
#include "fedgate/error.hpp"
#include "fedgate/rdma.hpp"

namespace fedgate {

// The stage a refusing REP's status belongs to: statuses only the initiator's own gateway gives
// (unknown_initiator, no_peer, bad_request) are "req", transport_mismatch is "transport", the rest
// (the target or its gateway said no) "refused".
ConnStage stage_of_refusal(ConnStatus s);

RdmaQpParams rdma_params_of(const ConnParams& p);
void put_rdma_params(const RdmaQpParams& q, ConnParams& p);

// How a connect() failed, inside the library (the public API throws it as Error).
struct ConnectError {
    ConnStage stage = ConnStage::resolve;
    std::string message;
};

// A random starting PSN (24 bits).
uint32_t random_psn(std::mt19937_64& rng);

// ---------------------------------------------------------------------------------------------
// The initiator.

struct HandshakeFailure {
    ConnStage stage = ConnStage::rep;
    std::string message;
};

struct ActiveCounters {
    uint64_t reqs_sent = 0, req_retransmits = 0, reps = 0, duplicate_reps = 0, ignored_reps = 0, rtus_sent = 0;
};

class ActiveHandshake {
public:
    enum class State : uint8_t { idle, waiting_rep, rep_received, done, failed };

    // `req`: the whole REQ (conn_id, both IDs, caps, RDMA parameters if any). The first try waits
    // `try_timeout_ms`, each retry twice as long as the one before; `tries` REQs in all (>= 1).
    ActiveHandshake(const ConnParams& req, uint64_t try_timeout_ms, int tries);

    // The REQ to send now.
    ConnParams start(uint64_t now_ms);
    // When on_timer wants to run next (meaningful while waiting for the REP).
    uint64_t deadline() const { return deadline_ms_; }
    // The REQ to send again if its try ran out; after the last try, fails at stage "rep".
    std::optional<ConnParams> on_timer(uint64_t now_ms);

    // A REP for this conn_id. The first one decides: an ok REP moves to rep_received (the caller
    // now brings its side up and calls complete()), a refusal or a REP that breaks the rules fails.
    // A duplicate after complete() returns the RTU to send again (its RTU was lost, or is late).
    std::optional<ConnParams> on_rep(const ConnParams& rep);
    // Our side is up: the RTU to send. State done.
    ConnParams complete();
    // Our side could not come up (RTR, RTS, the tcp connection).
    void fail(ConnStage stage, std::string message);

    State state() const { return state_; }
    const ConnParams& req() const { return req_; }
    const ConnParams& rep() const { return rep_; }  // valid from rep_received on
    const HandshakeFailure& failure() const { return failure_; }
    const ActiveCounters& counters() const { return counters_; }
    ConnParams rtu() const;

private:
    std::optional<std::string> check_rep(const ConnParams& rep) const;

    ConnParams req_;
    ConnParams rep_;
    uint64_t try_timeout_ms_;
    int tries_;
    int sent_ = 0;
    uint64_t wait_ms_ = 0;
    uint64_t deadline_ms_ = 0;
    State state_ = State::idle;
    HandshakeFailure failure_;
    ActiveCounters counters_;
};

// ---------------------------------------------------------------------------------------------
// The target.

// What the target offers a new REQ; filled by its Endpoint.
struct PassiveOffer {
    bool listening = false;
    bool backlog_full = false;
    uint8_t caps = 0;                  // the transports this side supports now
    std::optional<RdmaQpParams> rdma;  // a prepared QP, when RDMA is possible for this REQ
    uint32_t tcp_ipv4 = 0;             // where the initiator connects with tcp (registered record)
    uint16_t tcp_port = 0;
};

struct PassiveCounters {
    uint64_t reqs = 0, duplicate_reqs = 0, accepted = 0, established_by_rtu = 0, established_by_preamble = 0,
             late_rtus = 0, unknown_preambles = 0, half_open_dropped = 0, table_full = 0,
             finished_evicted = 0;  // finished entries dropped early to make room for new handshakes
    std::array<uint64_t, 10> refused{};  // by ConnStatus
};

class PassiveHandshakes {
public:
    enum class State : uint8_t { refused, half_open, rtu_seen, established };
    struct Entry {
        ConnParams req;
        ConnParams rep;
        State state = State::refused;
        uint64_t created_ms = 0;
    };
    using Key = std::pair<uint64_t, uint64_t>;  // initiator, conn_id

    // `timeout_ms`: how long a REP waits for RTU/preamble, and how long any entry is kept to answer
    // a duplicate REQ. `max_entries`: the table's bound (over it, REQs are answered busy).
    PassiveHandshakes(ProcessId self, uint64_t timeout_ms, std::size_t max_entries);

    // The saved REP of a REQ seen before (counted as a duplicate), or nothing for a new one.
    std::optional<ConnParams> repeat(const ConnParams& req);
    // A new REQ: decides, saves and returns its REP.
    ConnParams on_req(const ConnParams& req, const PassiveOffer& offer, uint64_t now_ms);
    // The transport a new REQ would get from `offer_caps`, before any resources are set up for it.
    static std::optional<Transport> would_choose(const ConnParams& req, uint8_t offer_caps) {
        return choose_transport(req.caps, offer_caps);
    }

    // RTU: true when it establishes the connection now (RDMA: hand it to accept(); tcp: the
    // preamble brings the socket). A late RTU (established already, or unknown) is counted.
    enum class RtuResult : uint8_t { established, awaiting_preamble, late };
    RtuResult on_rtu(const ConnParams& rtu);
    // The tcp preamble: the entry it belongs to, now established; null (counted) if it matches no
    // half-open tcp entry.
    const Entry* on_preamble(uint64_t conn_id, ProcessId initiator, ProcessId target);

    // Drops half-open entries older than the timeout (returned, counted) and forgets finished ones.
    std::vector<Key> expire(uint64_t now_ms);
    // A full table first drops its finished (established or refused) entries, which are only kept to
    // answer repeats; only handshakes still in progress can make it refuse new ones.
    void make_room();
    // When expire() has something to do next.
    std::optional<uint64_t> next_expiry() const;

    std::size_t half_open() const;
    std::size_t size() const { return table_.size(); }
    const PassiveCounters& counters() const { return counters_; }

private:
    struct KeyHash {
        std::size_t operator()(const Key& k) const { return std::hash<uint64_t>{}(k.first * 0x9e3779b97f4a7c15ULL ^ k.second); }
    };
    ConnParams decide(const ConnParams& req, const PassiveOffer& offer) const;

    ProcessId self_;
    uint64_t timeout_ms_;
    std::size_t max_entries_;
    std::unordered_map<Key, Entry, KeyHash> table_;
    PassiveCounters counters_;
};

}  // namespace fedgate
