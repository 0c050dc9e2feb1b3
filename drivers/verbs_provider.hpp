// The verbs backend (verbs.hpp) as the Endpoint's RdmaProvider (endpoint.hpp): opening the device,
// preparing one RC QP per connection, and moving it to RTR and RTS with the negotiated path.
#pragma once

#include <memory>
#include <string>

#include "drivers/endpoint.hpp"
#include "drivers/verbs.hpp"
#include "drivers/verbs_api.hpp"

namespace fedgate {

class VerbsProvider final : public RdmaProvider {
public:
    // `api`: real_verbs() in programs, a FakeVerbs in tests; it outlives the provider.
    VerbsProvider(VerbsApi& api, RdmaOptions options);
    bool open(std::string& error) override;
    std::unique_ptr<PreparedQp> prepare(std::string& error) override;
    const RdmaDevice* device() const { return device_.get(); }

private:
    VerbsApi& api_;
    RdmaOptions options_;
    std::unique_ptr<RdmaDevice> device_;
};

// The path the handshake negotiated, as the verbs backend's RemoteQp (RTR takes the peer's PSN).
RemoteQp remote_qp(const RdmaPath& path);

}  // namespace fedgate
