// fedgate-node's sidecar for programs that cannot change: `expose` hands each connection made to a
// process ID to a new local TCP connection, `forward` connects each local TCP connection to a process
// ID; both copy the bytes both ways (the pump) until each side is done.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "fedgate/connection.hpp"
#include "fedgate/endpoint.hpp"

namespace fedgate::sidecar {

// A local TCP address, host order.
struct LocalAddress {
    uint32_t ipv4 = 0;
    uint16_t port = 0;
    bool operator==(const LocalAddress&) const = default;
};

// "IP:PORT" or "localhost:PORT" (127.0.0.1); the port within min_port..65535. Names other than
// localhost are not looked up: a sidecar's target is on this node.
std::optional<LocalAddress> parse_local_address(std::string_view text, uint16_t min_port);
std::string address_text(LocalAddress a);  // "127.0.0.1:50051"

// ---- the pump --------------------------------------------------------------------------------

inline constexpr std::size_t kPumpChunk = std::size_t{1} << 20;  // per splice / copy: large, so few syscalls

// What one connection moved, each way, and why it ended if not by EOF on both sides.
struct PumpResult {
    uint64_t to_local = 0;    // from the fedgate connection into the local socket
    uint64_t from_local = 0;  // from the local socket into the fedgate connection
    std::string error;        // empty: both directions ended with EOF and were passed on
};

// Copies both ways between `conn` and the connected local TCP socket `local_fd` until both
// directions are done: EOF read from one side shuts down the other side's send direction (a
// half-close passes through), and an error on either shuts both sockets down. Runs one direction on
// the calling thread and the other on a second thread. A tcp connection moves with splice() on its
// socket (plain read/write where splice is refused); any other goes through recv_some/send_all.
// Closes neither side. SIGPIPE must be ignored (ignore_sigpipe): a peer may close at any time.
PumpResult pump(Connection& conn, int local_fd);

// The sidecar writes to sockets whose peers may be gone: EPIPE, not a signal. Process-wide.
void ignore_sigpipe();

// ---- expose and forward ----------------------------------------------------------------------

// Where the sidecar's lines go; each call is one whole line (no newline), made from any thread, one
// at a time.
struct Report {
    std::function<void(const std::string&)> out;  // readiness, one line per finished connection
    std::function<void(const std::string&)> err;  // failures
};

struct Totals {
    uint64_t connections = 0;  // handed over and pumped
    uint64_t failed = 0;       // could not be handed over (target refused, connect failed)
};

inline constexpr auto kLocalConnectTimeout = std::chrono::seconds(5);

// expose: accepts on `ep` (listening already) and hands each connection to a new TCP connection to
// `target`, until `stop_fd` becomes readable (-1: never). Then closes the connections still open,
// waits for their threads and returns what happened.
Totals expose(Endpoint& ep, LocalAddress target, int stop_fd, const Report& report);

// forward: accepts on `listen_fd` (a listening TCP socket on `listening`) and connects each to
// process `to` through `ep`, until `stop_fd` becomes readable. Stops `ep` before returning (a
// connect still under way fails).
Totals forward(Endpoint& ep, int listen_fd, LocalAddress listening, ProcessId to, int stop_fd, const Report& report);

}  // namespace fedgate::sidecar
