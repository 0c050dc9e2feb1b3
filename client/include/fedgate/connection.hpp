// A connection between two compute processes, set up by the handshake (conn_wire.hpp) and carried
// by one backend: verbs (RDMA over RoCE v2) or tcp. Both backends offer the same byte stream, so a
// program moves data the same way whichever transport the handshake chose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "proto/resolve_wire.hpp"
#include "fedgate/error.hpp"
#include "fedgate/rdma.hpp"

namespace fedgate {

class Connection {
public:
    virtual ~Connection() = default;

    // Sends every byte, blocking while the peer's window is full. Throws ConnectionError.
    virtual void send_all(std::span<const uint8_t> data) = 0;
    // Blocks until at least one byte has arrived; returns how many were copied into `buf`, 0 once
    // the peer has closed its side and everything it sent has been read. Throws ConnectionError.
    virtual std::size_t recv_some(std::span<uint8_t> buf) = 0;
    // Says no more will be sent; the peer's recv_some returns 0 after the last byte.
    virtual void shutdown_send() = 0;
    // Wakes every thread blocked in send_all or recv_some on this connection (they throw
    // ConnectionError, or recv_some returns 0) and makes later calls fail: for closing a
    // connection that another thread is using. Thread-safe; the connection is not usable after.
    virtual void cancel() = 0;

    virtual Transport transport() const = 0;
    virtual uint64_t conn_id() const = 0;
    virtual ProcessId local_pid() const = 0;
    virtual ProcessId peer_pid() const = 0;
    // The path the handshake gave this connection's QP (the peer's QP, both PSNs, the negotiated
    // MTU); nullopt for tcp.
    virtual std::optional<RdmaPath> rdma_path() const { return std::nullopt; }
    // The socket an event loop may poll for readability (tcp); -1 when there is none (RDMA).
    virtual int native_handle() const { return -1; }

    // Fills `buf` completely; false if the peer closed first.
    bool recv_exact(std::span<uint8_t> buf) {
        std::size_t got = 0;
        while (got < buf.size()) {
            const std::size_t n = recv_some(buf.subspan(got));
            if (n == 0) return false;
            got += n;
        }
        return true;
    }
};

}  // namespace fedgate
