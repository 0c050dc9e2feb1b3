// The handshake-only RdmaProvider: given QP values, recorded paths, no data path.
#include "fedgate/handshake_only.hpp"

#include <algorithm>

namespace fedgate {
namespace {

constexpr uint32_t kFirstOrdinaryQpn = 2;  // QP 0 and QP 1 are the SMI and GSI QPs

class HandshakeOnlyQp final : public PreparedQp {
public:
    explicit HandshakeOnlyQp(const RdmaQpParams& local) : local_(local) {}
    RdmaQpParams local() const override { return local_; }
    std::unique_ptr<Connection> connect(const RdmaPath& path, uint64_t conn_id, ProcessId local_pid,
                                        ProcessId peer_pid) override {
        return std::make_unique<HandshakeOnlyConnection>(local_, path, conn_id, local_pid, peer_pid);
    }

private:
    RdmaQpParams local_;
};

}  // namespace

void HandshakeOnlyConnection::send_all(std::span<const uint8_t>) { throw ConnectionError(kHandshakeOnlyNoData); }
std::size_t HandshakeOnlyConnection::recv_some(std::span<uint8_t>) { throw ConnectionError(kHandshakeOnlyNoData); }
void HandshakeOnlyConnection::shutdown_send() { throw ConnectionError(kHandshakeOnlyNoData); }

void HandshakeOnlyProvider::open() {
    std::string error;
    const std::string who = "handshake-only: ";
    if (local_.qpn < kFirstOrdinaryQpn || local_.qpn > kMaxQpn)
        error = who + "QP number " + std::to_string(local_.qpn) + " is not in 2..16777215";
    else if (local_.psn > kMaxPsn)
        error = who + "PSN " + std::to_string(local_.psn) + " is over 24 bits";
    else if (!valid_rdma_mtu(local_.mtu))
        error = who + "MTU " + std::to_string(local_.mtu) + " is not an RDMA path MTU (256, 512, 1024, 2048, 4096)";
    else if (std::all_of(local_.gid.begin(), local_.gid.end(), [](uint8_t b) { return b == 0; }))
        error = who + "the GID is zero";
    if (!error.empty()) throw Error(ConnStage::transport, error);
}

std::unique_ptr<PreparedQp> HandshakeOnlyProvider::prepare() {
    return std::make_unique<HandshakeOnlyQp>(local_);
}

}  // namespace fedgate
