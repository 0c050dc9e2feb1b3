// The RDMA side of a connection as the handshake carries it, and the hook an RDMA backend plugs
// into Endpoint: the library's own verbs backend is one, tests use fakes (see Endpoint's
// constructor).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "proto/resolve_wire.hpp"
#include "fedgate/error.hpp"

namespace fedgate {

class Connection;  // connection.hpp

// One side's RDMA queue pair as the handshake carries it.
struct RdmaQpParams {
    uint32_t qpn = 0;  // 24 bits
    uint32_t psn = 0;  // this side's starting send PSN, 24 bits, random
    uint16_t mtu = 0;  // this side's path MTU
    std::array<uint8_t, 16> gid{};
    uint32_t rkey = 0;  // this side's receive ring
    uint64_t raddr = 0;
    uint32_t rlen = 0;
    bool operator==(const RdmaQpParams&) const = default;
};

// What moving a QP to RTR and RTS needs, from both sides' parameters: each direction has its own
// PSN (the peer's start is what we expect to receive, ours is what we send), the MTU is the lower.
struct RdmaPath {
    RdmaQpParams remote;
    uint32_t rq_psn = 0;  // RTR: the peer's starting PSN
    uint32_t sq_psn = 0;  // RTS: our own
    uint16_t mtu = 0;     // the lower of both sides' path MTUs
    bool operator==(const RdmaPath&) const = default;
};
RdmaPath rdma_path(const RdmaQpParams& local, const RdmaQpParams& remote);

// A queue pair in INIT with its receive ring registered, not yet connected.
class PreparedQp {
public:
    virtual ~PreparedQp() = default;
    // Its parameters for the handshake: QP number, our random starting PSN, path MTU, GID, ring.
    virtual RdmaQpParams local() const = 0;
    // RTR with path.remote (qpn, gid), path.rq_psn and path.mtu, then RTS with path.sq_psn. Throws
    // Error of stage rtr or rts saying why.
    virtual std::unique_ptr<Connection> connect(const RdmaPath& path, uint64_t conn_id, ProcessId local_pid,
                                                ProcessId peer_pid) = 0;
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
    // Opens the device; throws Error of stage transport ("no RDMA device: ...") when there is none
    // usable. Endpoint calls it once, from its constructor.
    virtual void open() = 0;
    // A fresh QP for one connection; throws Error of stage transport.
    virtual std::unique_ptr<PreparedQp> prepare() = 0;
    // After a successful open(): the GID, MTU and a QP number to register. Each connection gets a
    // QP of its own, so the QPN is the one the provider hands to its first prepare().
    virtual RdmaDeviceParams device_params() const = 0;
};

// The library's verbs backend (rdma-core): the first RDMA device with a RoCE v2 GID in the node's
// subnet (`node_ipv4`, host order). Opening it throws when there is no device, and always in a
// library built without rdma-core (FEDGATE_VERBS=OFF: "not built with RDMA (FEDGATE_VERBS=OFF)").
std::unique_ptr<RdmaProvider> make_verbs_provider(uint32_t node_ipv4);

}  // namespace fedgate
