// An RdmaProvider without a device, for running the RDMA handshake where there is no RDMA NIC (the
// build machines, gateway tests): its QP is a set of given values (QPN, starting PSN, GID, MTU),
// and "connecting" it only records the path a real QP would be programmed with. The data calls of
// its connections fail: there is no data path.
#pragma once

#include <memory>
#include <string>

#include "fedgate/connection.hpp"
#include "fedgate/endpoint.hpp"
#include "fedgate/handshake.hpp"

namespace fedgate {

inline constexpr const char* kHandshakeOnlyNoData = "handshake-only: no data path";

// A connection of the handshake-only provider: the path RTR and RTS would have been given.
class HandshakeOnlyConnection final : public Connection {
public:
    HandshakeOnlyConnection(const RdmaQpParams& local, const RdmaPath& path, uint64_t conn_id, ProcessId local_pid,
                            ProcessId peer_pid)
        : local_(local), path_(path), conn_id_(conn_id), local_pid_(local_pid), peer_pid_(peer_pid) {}

    // Each throws ConnectionError(kHandshakeOnlyNoData).
    void send_all(std::span<const uint8_t> data) override;
    std::size_t recv_some(std::span<uint8_t> buf) override;
    void shutdown_send() override;
    void cancel() override {}  // nothing blocks: every data call throws

    Transport transport() const override { return Transport::roce_v2; }
    uint64_t conn_id() const override { return conn_id_; }
    ProcessId local_pid() const override { return local_pid_; }
    ProcessId peer_pid() const override { return peer_pid_; }
    std::optional<RdmaPath> rdma_path() const override { return path_; }
    const RdmaQpParams& local() const { return local_; }  // what this side put in its REQ or REP

private:
    RdmaQpParams local_;
    RdmaPath path_;
    uint64_t conn_id_;
    ProcessId local_pid_, peer_pid_;
};

class HandshakeOnlyProvider final : public RdmaProvider {
public:
    // `local`: the QP every connection reports (qpn, psn, mtu, gid; the ring fields stay as given,
    // normally 0: there is no ring).
    explicit HandshakeOnlyProvider(const RdmaQpParams& local) : local_(local) {}

    // Throws Error (stage transport) naming the bad value, for a QPN outside 2..2^24-1 (0 and 1 are the special QPs), a PSN
    // over 24 bits, an MTU that is no RDMA path MTU or a zero GID.
    void open() override;
    std::unique_ptr<PreparedQp> prepare() override;
    RdmaDeviceParams device_params() const override { return {local_.gid, local_.qpn, local_.mtu}; }
    const RdmaQpParams& local() const { return local_; }

private:
    RdmaQpParams local_;
};

}  // namespace fedgate
