// The verbs backend (verbs.hpp) as the Endpoint's RdmaProvider (endpoint.hpp): opening the device,
// preparing one RC QP per connection, and moving it to RTR and RTS with the negotiated path.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "fedgate/endpoint.hpp"
#include "drivers/verbs.hpp"
#include "drivers/verbs_api.hpp"

namespace fedgate {

class VerbsProvider final : public RdmaProvider {
public:
    // `api`: real_verbs() in programs, a FakeVerbs in tests; it outlives the provider.
    VerbsProvider(VerbsApi& api, RdmaOptions options);
    // Opens the device and prepares the first QP, whose number the record carries.
    void open() override;
    // The QP open() prepared the first time, a new one after that.
    std::unique_ptr<PreparedQp> prepare() override;
    // The GID chosen on the opened port, the port's active MTU and the first QP's number.
    RdmaDeviceParams device_params() const override { return params_; }
    const RdmaDevice* device() const { return device_.get(); }

private:
    VerbsApi& api_;
    RdmaOptions options_;
    // Shared with every connection it made: a connection may outlive the provider (and its Endpoint).
    std::shared_ptr<RdmaDevice> device_;
    RdmaDeviceParams params_;
    std::mutex first_mu_;  // prepare() runs on the endpoint's thread and on connect() callers
    std::unique_ptr<RdmaConnection> first_;  // declared after device_: destroyed before it
};

// The path the handshake negotiated, as the verbs backend's RemoteQp (RTR takes the peer's PSN).
RemoteQp remote_qp(const RdmaPath& path);

}  // namespace fedgate
