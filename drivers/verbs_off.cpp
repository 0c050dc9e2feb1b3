// The client library's RDMA backend in a build without rdma-core (FEDGATE_VERBS=OFF; CMake compiles
// this file instead of verbs.cpp, verbs_api.cpp and verbs_provider.cpp): a provider that never has a
// device and says why, so rdma fails at stage transport naming the build and auto uses tcp.
#include <memory>

#include "fedgate/error.hpp"
#include "fedgate/rdma.hpp"

namespace fedgate {
namespace {

// "no RDMA device" first, as the verbs backend says it, for whoever looks for that.
constexpr const char* kNotBuilt = "no RDMA device: this library was not built with RDMA (FEDGATE_VERBS=OFF)";

class NoVerbsProvider final : public RdmaProvider {
public:
    void open() override { throw Error(ConnStage::transport, kNotBuilt); }
    std::unique_ptr<PreparedQp> prepare() override { throw Error(ConnStage::transport, kNotBuilt); }
    RdmaDeviceParams device_params() const override { return {}; }
};

}  // namespace

std::unique_ptr<RdmaProvider> make_verbs_provider(uint32_t /*node_ipv4*/) {
    return std::make_unique<NoVerbsProvider>();
}

}  // namespace fedgate
