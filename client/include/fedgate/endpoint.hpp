// One compute process's connections to other processes, through its party's gateway: it registers
// (and keeps registered) from one UDP control socket, answers and starts the REQ/REP/RTU handshake
// (handshake.hpp) over that socket, and hands out Connections of the transport the handshake chose:
// RDMA through an RdmaProvider when both sides have a device, else tcp (tcp_backend.hpp).
//
// One background thread owns the control socket (and the tcp listening socket): heartbeats,
// retransmissions, expiry, incoming REQ/REP/RTU and tcp preambles. connect() and accept() block the
// calling thread only; connect() is safe from many threads at once.
#pragma once

#include <netinet/in.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "proto/conn_wire.hpp"
#include "fedgate/connection.hpp"
#include "fedgate/handshake.hpp"

namespace fedgate {

enum class TransportChoice : uint8_t { automatic, rdma, tcp };
const char* transport_choice_name(TransportChoice t);                // "auto", "rdma", "tcp"
std::optional<TransportChoice> parse_transport_choice(std::string_view s);

struct ConnectError {
    ConnStage stage = ConnStage::resolve;
    std::string message;
};

// ---- the RDMA hook ---------------------------------------------------------------------------
// What Endpoint needs from an RDMA backend; the verbs backend is adapted to it outside this file,
// tests use a fake.

// A queue pair in INIT with its receive ring registered, not yet connected.
class PreparedQp {
public:
    virtual ~PreparedQp() = default;
    // Its parameters for the handshake: QP number, our random starting PSN, path MTU, GID, ring.
    virtual RdmaQpParams local() const = 0;
    // RTR with path.remote (qpn, gid), path.rq_psn and path.mtu, then RTS with path.sq_psn. Null on
    // failure, with `failed` set to ConnStage::rtr or ConnStage::rts and `error` saying why.
    virtual std::unique_ptr<Connection> connect(const RdmaPath& path, uint64_t conn_id, ProcessId local_pid,
                                                ProcessId peer_pid, ConnStage& failed, std::string& error) = 0;
};

// What a process registers about its RDMA side in its DmaAddress record, so that the record and
// the connections it makes agree.
struct RdmaDeviceParams {
    std::array<uint8_t, 16> gid{};  // the GID its QPs speak from
    uint32_t qpn = 0;               // a QP number of this device (see device_params())
    uint16_t mtu = 0;               // the port's active MTU in bytes, the most a path can get
    bool operator==(const RdmaDeviceParams&) const = default;
};

class RdmaProvider {
public:
    virtual ~RdmaProvider() = default;
    // Opens the device; false with `error` ("no RDMA device: ...") when there is none usable.
    // Endpoint calls it once, from its constructor.
    virtual bool open(std::string& error) = 0;
    // A fresh QP for one connection; null with `error` set.
    virtual std::unique_ptr<PreparedQp> prepare(std::string& error) = 0;
    // After a successful open(): the GID, MTU and a QP number to register. Each connection gets a
    // QP of its own, so the QPN is the one the provider hands to its first prepare().
    virtual RdmaDeviceParams device_params() const = 0;
};

// ---- options and stats -----------------------------------------------------------------------

inline constexpr std::chrono::milliseconds kDefaultHandshakeTryTimeout{300};
inline constexpr int kDefaultHandshakeTries = 6;
inline constexpr std::size_t kDefaultAcceptBacklog = 128;
inline constexpr uint32_t kEndpointHeartbeatMs = 1000;  // when the gateway does not say

struct EndpointOptions {
    uint32_t gateway_ipv4 = 0;  // host order
    uint16_t gateway_port = kDefaultResolvePort;
    ProcessId pid;
    uint32_t epoch = 0;  // 0: seconds since the Unix epoch
    TransportChoice transport = TransportChoice::automatic;
    uint32_t bind_ipv4 = 0;  // this node's address (host order), required: the gateway checks it
    uint16_t tcp_port = 0;   // 0: ephemeral
    std::chrono::milliseconds try_timeout = kDefaultHandshakeTryTimeout;  // REQ retries double it
    int tries = kDefaultHandshakeTries;
    // How long a half-open handshake waits for RTU (or the tcp preamble); 0: as long as an
    // initiator retries (try_timeout * (2^tries - 1)).
    std::chrono::milliseconds handshake_timeout{0};
    std::size_t accept_backlog = kDefaultAcceptBacklog;  // queued + half-open; beyond it REQs get busy
    // Where the one-time fallback notice ("endpoint ID: no RDMA device (...); using tcp") goes;
    // null: stderr, after "fedgate ".
    std::function<void(const std::string&)> log;
};

struct EndpointStats {
    uint64_t connects_ok = 0;
    std::array<uint64_t, kConnStageCount> connects_failed{};  // by ConnStage
    uint64_t accepts = 0;            // connections handed out by accept()
    uint64_t established = 0;        // target side: handshakes that became connections (queued)
    uint64_t late_rtus = 0;          // RTUs for established or unknown handshakes, ignored
    uint64_t half_open_dropped = 0;  // target side: no RTU/preamble within the handshake timeout
    uint64_t tcp_fallbacks = 0;      // connections over tcp because automatic found no RDMA device
    uint64_t reqs_received = 0, duplicate_reqs = 0, reqs_refused = 0;
    uint64_t reqs_sent = 0, req_retransmits = 0, rtus_sent = 0, duplicate_reps = 0;
    uint64_t preambles_rejected = 0;  // tcp sockets closed: bad or unknown preamble, or too slow
    uint64_t ignored_datagrams = 0;   // not from the gateway, malformed, or for no handshake of ours
    uint64_t heartbeats_sent = 0, reregistrations = 0;
    uint64_t rdma_setup_failures = 0;  // target side: prepare/RTR/RTS failed; answered with tcp or busy
};

// ---- the endpoint ----------------------------------------------------------------------------

class Endpoint {
public:
    // Opens the sockets, opens the RDMA device (unless transport is tcp), registers with the
    // gateway and starts the background thread. Throws std::invalid_argument for bad options,
    // std::runtime_error when a socket cannot be set up or the gateway refuses or does not answer
    // the registration. `rdma`: null means no RDMA device (outlives the Endpoint otherwise).
    explicit Endpoint(EndpointOptions options, RdmaProvider* rdma = nullptr);
    ~Endpoint();  // stop()
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;

    // Accept connections from now on (before, REQs are answered not_listening). False with
    // `err` (stage transport) when the transport asked for cannot be offered.
    bool listen(ConnectError& err);
    // The next established incoming connection, or null after `timeout` (or once stopped).
    std::unique_ptr<Connection> accept(std::chrono::milliseconds timeout);
    // A connection to `target` (party 0: the gateway finds the owner), over `transport` (default:
    // the endpoint's). Null with `err` naming the stage on failure. Thread-safe.
    std::unique_ptr<Connection> connect(ProcessId target, ConnectError& err,
                                        std::optional<TransportChoice> transport = std::nullopt);
    // Stops the thread, fails pending connects, deregisters. Idempotent.
    void stop();

    ProcessId pid() const { return options_.pid; }
    uint32_t epoch() const { return options_.epoch; }
    uint16_t tcp_port() const { return tcp_port_; }  // 0 when tcp is not offered
    bool rdma_available() const { return rdma_ready_; }
    EndpointStats stats() const;

private:
    struct Active {
        ActiveHandshake hs;
        uint64_t finished_ms = 0;  // done: kept this long to answer duplicate REPs with RTU
    };
    struct PendingSocket {  // accepted tcp socket whose preamble is not complete yet
        int fd = -1;
        std::size_t got = 0;
        uint8_t buf[32] = {};
        uint64_t deadline_ms = 0;
    };

    void open_sockets();
    void open_rdma(RdmaProvider* rdma);
    void register_now();
    void deregister_now();
    // Request/reply on the control socket while the thread is not running (start, stop).
    std::optional<RegReplyBody> reg_exchange(MsgType type, std::span<const uint8_t> body, int tries,
                                             std::string& error);
    void close_sockets();
    uint8_t offer_caps() const;
    DmaAddress record() const;
    bool caps_for(TransportChoice t, uint8_t& caps, ConnectError& err) const;
    std::unique_ptr<Connection> fail(ConnectError& err, ConnStage stage, std::string message);
    std::unique_ptr<Connection> run_handshake(const ConnParams& req, std::unique_ptr<PreparedQp> qp,
                                              ConnectError& err);
    std::unique_ptr<Connection> finish_connect(const std::shared_ptr<Active>& a, PreparedQp* qp, ConnectError& err);

    // The background thread and what it does (all under mu_ except the socket calls).
    void run();
    int poll_timeout_ms(uint64_t now);
    void on_datagram(std::span<const uint8_t> d, uint64_t now);
    void on_reg_reply(const ParsedMsg& m);
    void on_conn_req(const ConnParams& req, uint64_t now);
    void on_conn_rep(const ConnParams& rep);
    void on_conn_rtu(const ConnParams& rtu);
    PassiveOffer offer_for(const ConnParams& req, std::unique_ptr<Connection>& rdma_conn);
    void accept_tcp(uint64_t now);
    void read_preamble(PendingSocket& s);
    void timers(uint64_t now);
    void send_heartbeat(uint64_t now);
    void send(MsgType type, const ConnParams& p);
    void send_raw(MsgType type, uint64_t seq, std::span<const uint8_t> body);
    void wake();
    uint64_t now_ms() const;
    bool from_gateway(const sockaddr_in& from) const;

    EndpointOptions options_;
    RdmaProvider* rdma_ = nullptr;
    bool rdma_ready_ = false;
    RdmaDeviceParams rdma_params_;  // what record() registers, read once at open
    std::string rdma_error_;
    uint64_t handshake_timeout_ms_ = 0;
    int ctl_fd_ = -1;
    int tcp_fd_ = -1;
    int wake_fd_ = -1;
    uint16_t tcp_port_ = 0;
    uint32_t heartbeat_ms_ = kEndpointHeartbeatMs;

    std::mutex send_mu_;  // ctl_fd_ stays open while a send uses it (stop() closes it)
    mutable std::mutex mu_;  // everything below
    std::condition_variable changed_;  // a handshake moved, a connection was queued, or stopping
    bool listening_ = false;
    bool stopping_ = false;
    std::mt19937_64 rng_;
    std::unordered_map<uint64_t, std::shared_ptr<Active>> active_;  // by conn_id
    PassiveHandshakes passive_;
    std::map<PassiveHandshakes::Key, std::unique_ptr<Connection>> rdma_half_open_;  // until RTU
    std::deque<std::unique_ptr<Connection>> accepted_;
    std::vector<PendingSocket> pending_;  // the thread's own (stop() closes them after it ended)
    uint64_t next_heartbeat_ms_ = 0;
    uint64_t heartbeat_seq_ = 0, reg_seq_ = 0;
    EndpointStats stats_;
    std::thread thread_;
};

}  // namespace fedgate
