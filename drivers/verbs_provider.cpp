// Adapter from the verbs backend to the Endpoint's RDMA hook.
#include "drivers/verbs_provider.hpp"

namespace fedgate {
namespace {

class VerbsPreparedQp final : public PreparedQp {
public:
    explicit VerbsPreparedQp(std::unique_ptr<RdmaConnection> c) : conn_(std::move(c)) {}

    RdmaQpParams local() const override {
        const LocalQp l = conn_->local();
        return RdmaQpParams{l.qpn, l.psn, l.mtu, l.gid, l.rkey, l.raddr, l.rlen};
    }

    std::unique_ptr<Connection> connect(const RdmaPath& path, uint64_t conn_id, ProcessId local_pid,
                                        ProcessId peer_pid) override {
        if (conn_ == nullptr) throw Error(ConnStage::rtr, "this QP was already connected");
        RdmaConnection::Stage stage = RdmaConnection::Stage::rtr;
        std::string error;
        if (!conn_->connect(remote_qp(path), local_pid, peer_pid, conn_id, error, &stage))
            throw Error(stage == RdmaConnection::Stage::rtr ? ConnStage::rtr : ConnStage::rts, error);
        return std::move(conn_);
    }

private:
    std::unique_ptr<RdmaConnection> conn_;
};

}  // namespace

RemoteQp remote_qp(const RdmaPath& path) {
    const RdmaQpParams& r = path.remote;
    return RemoteQp{r.qpn, path.rq_psn, path.mtu, r.gid, r.rkey, r.raddr, r.rlen};
}

VerbsProvider::VerbsProvider(VerbsApi& api, RdmaOptions options) : api_(api), options_(std::move(options)) {}

void VerbsProvider::open() {
    std::string error;
    device_ = RdmaDevice::open(api_, options_, error);
    if (device_ == nullptr) throw Error(ConnStage::transport, error);
    first_ = RdmaConnection::prepare(*device_, error);
    if (first_ == nullptr) {
        const std::string name = device_->name();
        device_.reset();
        throw Error(ConnStage::transport, "RDMA device " + name + " cannot make a queue pair: " + error);
    }
    params_ = RdmaDeviceParams{device_->gid(), first_->local().qpn, device_->active_mtu_bytes()};
}

std::unique_ptr<PreparedQp> VerbsProvider::prepare() {
    if (device_ == nullptr) throw Error(ConnStage::transport, "no RDMA device is open");
    std::string error;
    {
        std::lock_guard lock(first_mu_);
        if (first_ != nullptr) return std::make_unique<VerbsPreparedQp>(std::move(first_));
    }
    std::unique_ptr<RdmaConnection> c = RdmaConnection::prepare(*device_, error);
    if (c == nullptr) throw Error(ConnStage::transport, error);
    return std::make_unique<VerbsPreparedQp>(std::move(c));
}

std::unique_ptr<RdmaProvider> make_verbs_provider(uint32_t node_ipv4) {
    RdmaOptions r;
    r.local_ipv4 = node_ipv4;
    return std::make_unique<VerbsProvider>(real_verbs(), r);
}

}  // namespace fedgate
