// One compute process's connections to other processes, through its party's gateway: it registers
// (and keeps registered) from one UDP control socket, answers and starts the REQ/REP/RTU handshake
// (handshake.hpp) over that socket, and hands out Connections of the transport the handshake chose:
// RDMA through an RdmaProvider when both sides have a device, else tcp (tcp_backend.hpp).
//
// One background thread owns the control socket (and the tcp listening socket): heartbeats,
// retransmissions, expiry, incoming REQ/REP/RTU and tcp preambles. connect() and accept() block the
// calling thread only; connect() is safe from many threads at once.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "proto/resolve_wire.hpp"
#include "fedgate/connection.hpp"
#include "fedgate/error.hpp"
#include "fedgate/rdma.hpp"

namespace fedgate {

enum class TransportChoice : uint8_t { automatic, rdma, tcp };
const char* transport_choice_name(TransportChoice t);                // "auto", "rdma", "tcp"
std::optional<TransportChoice> parse_transport_choice(std::string_view s);

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
    // gateway and starts the background thread. Throws Error of stage open for bad options, a
    // socket that cannot be set up, or a registration the gateway refuses or does not answer.
    // `rdma`: the RDMA backend (outlives the Endpoint); null: the library's verbs backend
    // (make_verbs_provider). Without a device, automatic means tcp (said once through
    // options.log) and an rdma connect fails at stage transport naming the missing device.
    explicit Endpoint(EndpointOptions options, RdmaProvider* rdma = nullptr);
    ~Endpoint();  // stop()
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;

    // Accept connections from now on (before, REQs are answered not_listening). Throws Error of
    // stage transport when the transport asked for cannot be offered.
    void listen();
    // The next established incoming connection, or null after `timeout` (or once stopped): a
    // timeout is not an error.
    std::unique_ptr<Connection> accept(std::chrono::milliseconds timeout);
    // A connection to `target` (party 0: the gateway finds the owner), over `transport` (default:
    // the endpoint's). Throws Error naming the stage that failed. Thread-safe.
    std::unique_ptr<Connection> connect(ProcessId target, std::optional<TransportChoice> transport = std::nullopt);
    // `target`'s address record as the gateway answers it (cache, directed query or broadcast).
    // Throws Error of stage resolve: not found, unreachable, or no answer. Thread-safe.
    DmaAddress resolve(ProcessId target);
    // Stops the thread, fails pending connects, deregisters. Idempotent.
    void stop();

    ProcessId pid() const;
    uint32_t epoch() const;
    uint16_t tcp_port() const;  // 0 when tcp is not offered
    bool rdma_available() const;
    EndpointStats stats() const;

    class Impl;  // the library's own

private:
    std::unique_ptr<RdmaProvider> own_rdma_;  // make_verbs_provider() when none was given
    std::unique_ptr<Impl> impl_;
};

}  // namespace fedgate
