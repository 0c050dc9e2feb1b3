// The gateway's part in the connection handshake (conn_wire.hpp): it relays REQ, REP and RTU
// between its registered compute processes and the peer gateways, checks who may set up what, and
// rewrites the tcp endpoint in REP so that the initiator gets an address it can reach from where it
// sits (through port mappings it asks RelayIo for). Pure: time is passed in, all I/O and lookups go
// through RelayIo, so tests drive two relays against each other in one process.
//
// Roles, per handshake (key: initiator, conn_id):
//   outbound  the initiator is ours: conn_req from it goes out as hs_req, hs_rep comes back as conn_rep
//   inbound   the target is ours: hs_req goes to it as conn_req, its conn_rep goes back as hs_rep
//   local     both are ours: conn_req/conn_rep/conn_rtu go straight from one to the other
// Each message is idempotent: a repeated REQ is relayed again (or answered with the REP already
// seen), a repeated REP is passed on again. The relay itself never retransmits; the initiator does.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>

#include "controlplane/config.hpp"
#include "controlplane/roce_translations.hpp"
#include "proto/conn_wire.hpp"

namespace fedgate {

// How far a relayed handshake has come.
enum class RelayStage : uint8_t { req_relayed, rep_relayed, established, refused, timed_out };
const char* relay_stage_name(RelayStage s);

struct Endpoint4 {
    uint32_t addr = 0;  // host order
    uint16_t port = 0;
};

class RelayIo {
public:
    virtual ~RelayIo() = default;
    // A registered local process: the address it registered from and its control endpoint (where
    // its registration and heartbeats come from, and where handshake messages for it go).
    virtual std::optional<Endpoint4> control_endpoint(ProcessId pid) = 0;
    virtual bool has_peer(uint16_t party) = 0;
    virtual void to_process(Endpoint4 dst, MsgType type, const ConnParams& p) = 0;
    virtual void to_peer(uint16_t party, MsgType type, const ConnParams& p) = 0;
    // tcp: where a peer's initiator reaches our target: our external address and the port its
    // endpoint is exported on. Empty: not exported (no port was free).
    virtual std::optional<Endpoint4> exported_endpoint(ProcessId target) = 0;
    // tcp: where our initiator reaches the peer's exported port: our internal address and a port
    // imported for it. Empty: no port free.
    virtual std::optional<Endpoint4> imported_endpoint(uint16_t party, uint16_t peer_port, ProcessId target,
                                                       ProcessId initiator) = 0;

    // RDMA between parties (roce_translations.hpp): a virtual QPN on a side (empty: none free),
    // giving one back that was never installed, and installing an established connection's pair.
    virtual std::optional<uint32_t> roce_reserve(RoceSide side) = 0;
    virtual void roce_release(RoceSide side, uint32_t vqpn) = 0;
    virtual bool roce_install(const RoceConn& c) = 0;
    // This gateway's address on a side and a peer gateway's external address (host order; 0: none),
    // and the largest RDMA MTU this gateway's ports carry.
    virtual uint32_t own_address(RoceSide side) = 0;
    virtual uint32_t peer_address(uint16_t party) = 0;
    virtual uint16_t rdma_mtu_limit() = 0;
};


struct RelayCounters {
    uint64_t req_relayed = 0, rep_relayed = 0, rtu_relayed = 0, duplicates = 0, established = 0, timed_out = 0,
             unknown_handshake = 0, wrong_sender = 0, rdma_translated = 0, rdma_unmapped_gid = 0;
    std::array<uint64_t, 10> refused{};  // by ConnStatus (what this gateway or the far side refused)
};

class HandshakeRelay {
public:
    HandshakeRelay(uint16_t party_id, const ConnectSettings& settings, RelayIo& io);

    // From a compute process on the private network (src: its address and UDP port).
    void on_client(MsgType type, Endpoint4 src, const ConnParams& p, uint64_t now_ms);
    // From a peer gateway whose address, freshness and MAC the data plane has checked.
    void on_peer(MsgType type, uint16_t party, const ConnParams& p, uint64_t now_ms);
    // Handshakes not done in time fail; finished ones leave the table after the same time.
    void expire(uint64_t now_ms);

    // The management request conn_list: newest first, at most `limit`.
    nlohmann::ordered_json list(std::size_t limit, uint64_t now_ms) const;
    nlohmann::ordered_json stats() const;
    const RelayCounters& counters() const { return counters_; }
    std::size_t size() const { return table_.size(); }

private:
    enum class Role : uint8_t { outbound, inbound, local };
    // The RDMA side of a handshake between parties: what this gateway reserved and learned.
    struct Roce {
        bool on = false;          // the REQ offered RDMA and this gateway translates it
        bool installed = false;   // the translations own the vQPNs now
        uint32_t node_addr = 0;   // our process's RoCE address (host order) and real QPN
        uint32_t node_qpn = 0;
        uint32_t peer_vqpn = 0;   // the peer gateway's external-side vQPN
        std::optional<uint32_t> internal_vqpn, external_vqpn;
    };
    struct Entry {
        Role role = Role::outbound;
        ConnParams req;                 // as passed on (RDMA fields translated)
        uint16_t peer = 0;              // the other gateway's party (outbound, inbound)
        Endpoint4 initiator;            // its control endpoint (outbound, local)
        std::optional<ConnParams> rep;  // as passed on toward the initiator
        RelayStage stage = RelayStage::req_relayed;
        uint64_t created_ms = 0, updated_ms = 0;
        Roce roce;
    };
    using Key = std::pair<uint64_t, uint64_t>;  // initiator, conn_id
    struct KeyHash {
        std::size_t operator()(const Key& k) const { return std::hash<uint64_t>{}(k.first * 0x9e3779b97f4a7c15ULL ^ k.second); }
    };

    void client_req(Endpoint4 src, const ConnParams& p, uint64_t now_ms);
    void client_rep(Endpoint4 src, const ConnParams& p, uint64_t now_ms);
    void client_rtu(Endpoint4 src, const ConnParams& p, uint64_t now_ms);
    void peer_req(uint16_t party, const ConnParams& p, uint64_t now_ms);
    void peer_rep(uint16_t party, const ConnParams& p, uint64_t now_ms);
    void peer_rtu(uint16_t party, const ConnParams& p, uint64_t now_ms);

    Entry* find(const ConnParams& p);
    // find(), but a timed-out entry is removed and not found: for a REQ, which then starts over.
    Entry* find_live(const ConnParams& p);
    Entry* insert(Role role, const ConnParams& p, uint64_t now_ms);
    // A refusal goes back the way the REQ came: to the process (src) or to the peer gateway.
    void refuse_to_process(Endpoint4 src, const ConnParams& req, ConnStatus why, uint64_t now_ms);
    void refuse_to_peer(uint16_t party, const ConnParams& req, ConnStatus why, uint64_t now_ms);
    void record_refusal(Role role, const ConnParams& req, uint16_t peer, Endpoint4 initiator, const ConnParams& rep,
                        uint64_t now_ms);
    void count_refused(ConnStatus s);
    // The target's REP as it leaves this gateway toward the initiator's side (tcp endpoint rewritten).
    ConnParams outgoing_rep(Entry& e, const ConnParams& rep);
    static ConnParams refusal(const ConnParams& req, ConnStatus why);
    // RDMA translation steps; each returns the status to refuse with, or ok.
    ConnStatus translate_req_out(Entry& e, ConnParams& out);            // outbound REQ, to the peer
    ConnStatus translate_req_in(Entry& e, ConnParams& out);             // inbound REQ, to our target
    ConnStatus translate_rep(Entry& e, const ConnParams& rep, ConnParams& out);  // REP, either role
    void install_roce(Entry& e, uint64_t now_ms);
    void release_roce(Entry& e);
    // RTU toward the target carries what the target was told in REQ, not the initiator's own values.
    static ConnParams rtu_as_sent(const Entry& e, const ConnParams& rtu);
    uint16_t clamp_mtu(uint16_t mtu);

    const uint16_t party_;
    const ConnectSettings settings_;
    RelayIo& io_;
    std::unordered_map<Key, Entry, KeyHash> table_;
    RelayCounters counters_;
};

}  // namespace fedgate
