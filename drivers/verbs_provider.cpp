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

    std::unique_ptr<Connection> connect(const RdmaPath& path, uint64_t conn_id, ProcessId local_pid, ProcessId peer_pid,
                                        ConnStage& failed, std::string& error) override {
        if (conn_ == nullptr) {
            failed = ConnStage::rtr;
            error = "this QP was already connected";
            return nullptr;
        }
        RdmaConnection::Stage stage = RdmaConnection::Stage::rtr;
        if (!conn_->connect(remote_qp(path), local_pid, peer_pid, conn_id, error, &stage)) {
            failed = stage == RdmaConnection::Stage::rtr ? ConnStage::rtr : ConnStage::rts;
            return nullptr;
        }
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

bool VerbsProvider::open(std::string& error) {
    device_ = RdmaDevice::open(api_, options_, error);
    if (device_ == nullptr) return false;
    first_ = RdmaConnection::prepare(*device_, error);
    if (first_ == nullptr) {
        error = "RDMA device " + device_->name() + " cannot make a queue pair: " + error;
        device_.reset();
        return false;
    }
    params_ = RdmaDeviceParams{device_->gid(), first_->local().qpn, device_->active_mtu_bytes()};
    return true;
}

std::unique_ptr<PreparedQp> VerbsProvider::prepare(std::string& error) {
    if (device_ == nullptr) {
        error = "no RDMA device is open";
        return nullptr;
    }
    {
        std::lock_guard lock(first_mu_);
        if (first_ != nullptr) return std::make_unique<VerbsPreparedQp>(std::move(first_));
    }
    std::unique_ptr<RdmaConnection> c = RdmaConnection::prepare(*device_, error);
    if (c == nullptr) return nullptr;
    return std::make_unique<VerbsPreparedQp>(std::move(c));
}

}  // namespace fedgate
