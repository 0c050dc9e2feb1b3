// fedgate_verbs_probe: can the verbs backend open an RDMA device here? Prints the device, port, GID
// and MTU it would use (exit 0), or the backend's own error (exit 3 when there is no device at all,
// 1 otherwise). Used by tests/integration/rdma_hw.sh where ibv_devices is not installed.
// usage: fedgate_verbs_probe [DEVICE [PORT [GID_INDEX]]]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "drivers/verbs.hpp"

int main(int argc, char** argv) {
    fedgate::RdmaOptions options;
    if (argc > 1) options.device = argv[1];
    if (argc > 2) options.port = static_cast<uint8_t>(std::atoi(argv[2]));
    if (argc > 3) options.gid_index = static_cast<uint32_t>(std::atoi(argv[3]));
    std::string error;
    const auto dev = fedgate::RdmaDevice::open(fedgate::real_verbs(), options, error);
    if (!dev) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return error.rfind("no RDMA device:", 0) == 0 ? 3 : 1;
    }
    std::printf("device %s port %u gid_index %u gid %s mtu %u\n", dev->name().c_str(), dev->port(), dev->gid_index(),
                fedgate::format_gid(dev->gid()).c_str(), dev->active_mtu_bytes());
    return 0;
}
