// The compute-node side of the resolution service: register, heartbeat, deregister and resolve with
// one gateway over UDP (no DPDK; links only fedgate_wire).
//
// Every call sends one request and waits for the reply that carries the same type and request ID
// from the gateway's own address and port, retrying the same request (same ID) with a doubling
// timeout. A refusal or negative answer is a reply like any other; only "no reply at all" is a
// transport error. Thread-compatible: one client per thread, no shared state between clients.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>

#include "proto/resolve_wire.hpp"

namespace fedgate {

inline constexpr std::chrono::milliseconds kDefaultTryTimeout{300};
inline constexpr int kDefaultTries = 4;

struct NodeClientOptions {
    std::chrono::milliseconds timeout = kDefaultTryTimeout;  // wait for the first try; doubles each retry
    int tries = kDefaultTries;                               // requests sent before giving up, >= 1
    // Local address to send from (host order); the gateway checks that a registration comes from
    // the record's own address. Empty: the kernel picks by route.
    std::optional<uint32_t> bind_ipv4;
};

// The gateway's answer to register, heartbeat or deregister.
struct RegResult {
    std::optional<RegStatus> status;  // empty: no reply (see error)
    ProcessId pid;                    // as the reply states them
    uint32_t epoch = 0;
    uint32_t heartbeat_ms = 0;  // how often the gateway wants heartbeats; 0: it did not say
    std::string error;          // "no reply from gateway IP:PORT after N tries" when status is empty

    bool replied() const { return status.has_value(); }
    bool ok() const { return status == RegStatus::ok; }
};

// The gateway's answer to resolve.
struct ResolveResult {
    std::optional<ResolveStatus> status;  // empty: no reply (see error)
    AnswerSource source = AnswerSource::cache;
    ProcessId target;    // as the reply states it (as asked)
    DmaAddress record;   // meaningful when status == ok
    std::string error;

    bool replied() const { return status.has_value(); }
    bool ok() const { return status == ResolveStatus::ok; }
};

struct NodeClientStats {
    uint64_t requests_sent = 0;    // datagrams sent, retries included
    uint64_t retries = 0;          // of those, repeats of an unanswered request
    uint64_t replies = 0;          // replies accepted
    uint64_t ignored_replies = 0;  // datagrams dropped: malformed, wrong ID, wrong type, wrong source
    uint64_t send_errors = 0;      // sendto() failures (each still waits out its try)
    uint64_t no_reply = 0;         // calls that ended without a reply
};

class NodeClient {
public:
    // Opens one UDP socket (bound to options.bind_ipv4 if given, ephemeral port). Throws
    // std::system_error if the socket cannot be set up, std::invalid_argument for tries < 1 or a
    // timeout under 1 ms.
    NodeClient(uint32_t gateway_ipv4, uint16_t gateway_port = kDefaultResolvePort, NodeClientOptions options = {});
    ~NodeClient();
    NodeClient(NodeClient&& other) noexcept;
    NodeClient& operator=(NodeClient&& other) noexcept;
    NodeClient(const NodeClient&) = delete;
    NodeClient& operator=(const NodeClient&) = delete;

    RegResult register_process(const DmaAddress& record);
    RegResult heartbeat(ProcessId pid, uint32_t epoch);
    RegResult deregister(ProcessId pid, uint32_t epoch);
    ResolveResult resolve(ProcessId target);

    const NodeClientStats& stats() const { return stats_; }
    std::string gateway() const;  // "IP:PORT"
    uint16_t local_port() const;  // the socket's ephemeral port (host order)

private:
    // Sends header(type, fresh ID) + body until a well-formed reply of `reply_type` with that ID
    // arrives from the gateway and `accept` takes its body (false: malformed, keep waiting), or the
    // tries run out (false, `error` says so).
    bool exchange(MsgType type, std::span<const uint8_t> body, MsgType reply_type,
                  const std::function<bool(std::span<const uint8_t>)>& accept, std::string& error);
    RegResult reg_call(MsgType type, std::span<const uint8_t> body);
    void close_socket();

    int fd_ = -1;
    uint32_t gateway_ipv4_ = 0;
    uint16_t gateway_port_ = 0;
    NodeClientOptions options_;
    std::mt19937_64 ids_;
    NodeClientStats stats_;
};

}  // namespace fedgate
