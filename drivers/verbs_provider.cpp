// Adapter from the verbs backend to the Endpoint's RDMA hook.
#include "drivers/verbs_provider.hpp"

namespace fedgate {
namespace {

// An RDMA connection holding on to its device, which must outlive its QP, CQ and memory regions.
class DeviceHeldConnection final : public Connection {
public:
    DeviceHeldConnection(std::shared_ptr<RdmaDevice> device, std::unique_ptr<RdmaConnection> c)
        : device_(std::move(device)), c_(std::move(c)) {}
    void send_all(std::span<const uint8_t> data) override { c_->send_all(data); }
    std::size_t recv_some(std::span<uint8_t> buf) override { return c_->recv_some(buf); }
    void shutdown_send() override { c_->shutdown_send(); }
    void cancel() override { c_->cancel(); }
    Transport transport() const override { return c_->transport(); }
    uint64_t conn_id() const override { return c_->conn_id(); }
    ProcessId local_pid() const override { return c_->local_pid(); }
    ProcessId peer_pid() const override { return c_->peer_pid(); }
    std::optional<RdmaPath> rdma_path() const override { return c_->rdma_path(); }

private:
    std::shared_ptr<RdmaDevice> device_;  // declared first: goes after the connection
    std::unique_ptr<RdmaConnection> c_;
};

class VerbsPreparedQp final : public PreparedQp {
public:
    VerbsPreparedQp(std::shared_ptr<RdmaDevice> device, std::unique_ptr<RdmaConnection> c)
        : device_(std::move(device)), conn_(std::move(c)) {}

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
        return std::make_unique<DeviceHeldConnection>(device_, std::move(conn_));
    }

private:
    std::shared_ptr<RdmaDevice> device_;  // declared first: goes after the QP
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
    device_ = std::shared_ptr<RdmaDevice>(RdmaDevice::open(api_, options_, error));
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
        if (first_ != nullptr) return std::make_unique<VerbsPreparedQp>(device_, std::move(first_));
    }
    std::unique_ptr<RdmaConnection> c = RdmaConnection::prepare(*device_, error);
    if (c == nullptr) throw Error(ConnStage::transport, error);
    return std::make_unique<VerbsPreparedQp>(device_, std::move(c));
}

std::unique_ptr<RdmaProvider> make_verbs_provider(uint32_t node_ipv4) {
    RdmaOptions r;
    r.local_ipv4 = node_ipv4;
    return std::make_unique<VerbsProvider>(real_verbs(), r);
}

}  // namespace fedgate
