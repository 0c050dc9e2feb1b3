// The tcp backend: a Connection over a connected TCP socket, the listening socket a target accepts
// on, and the fixed preamble an initiator sends first so the target knows which handshake a new
// socket belongs to.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "fedgate/connection.hpp"

namespace fedgate {

// ---- the preamble --------------------------------------------------------------------------

inline constexpr uint32_t kPreambleMagic = 0x46475443;  // "FGTC"
inline constexpr uint8_t kPreambleVersion = 1;

#pragma pack(push, 1)
struct PreambleWire {
    uint8_t magic[4];
    uint8_t version;
    uint8_t reserved[3];
    uint8_t conn_id[8];
    uint8_t initiator[8];
    uint8_t target[8];
};
#pragma pack(pop)
static_assert(sizeof(PreambleWire) == 32);

struct Preamble {
    uint64_t conn_id = 0;
    ProcessId initiator;
    ProcessId target;
    bool operator==(const Preamble&) const = default;
};

void encode(const Preamble& p, PreambleWire& w);
// Rejects a wrong magic or version, non-zero reserved bytes and zero IDs.
std::optional<Preamble> decode(const PreambleWire& w);

// ---- sockets ---------------------------------------------------------------------------------

// A listening TCP socket on ipv4:port (port 0: ephemeral), non-blocking, close-on-exec. -1 with
// `error` set when it cannot be opened.
int open_tcp_listener(uint32_t ipv4, uint16_t port, int backlog, std::string& error);
// The local port a socket is bound to (host order); 0 if unknown.
uint16_t socket_port(int fd);
// A blocking TCP connection to ipv4:port within `timeout`; -1 with `error` set.
int tcp_connect(uint32_t ipv4, uint16_t port, std::chrono::milliseconds timeout, std::string& error);
// "A.B.C.D".
std::string ipv4_text(uint32_t host_order);

class TcpConnection : public Connection {
public:
    // Takes ownership of `fd`, a connected stream socket (made blocking here).
    TcpConnection(int fd, uint64_t conn_id, ProcessId local, ProcessId peer);
    ~TcpConnection() override;
    TcpConnection(const TcpConnection&) = delete;
    TcpConnection& operator=(const TcpConnection&) = delete;

    void send_all(std::span<const uint8_t> data) override;
    std::size_t recv_some(std::span<uint8_t> buf) override;
    void shutdown_send() override;
    void cancel() override;

    Transport transport() const override { return Transport::tcp; }
    uint64_t conn_id() const override { return conn_id_; }
    ProcessId local_pid() const override { return local_; }
    ProcessId peer_pid() const override { return peer_; }
    int native_handle() const override { return fd_; }

private:
    int fd_;
    uint64_t conn_id_;
    ProcessId local_;
    ProcessId peer_;
};

}  // namespace fedgate
