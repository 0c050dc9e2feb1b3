// fedgate_verbs_loopback: two RdmaConnections in one process over a real RDMA device, each the
// other's peer on the device's own GID (the NIC loops RoCE v2 back to itself). Sends 64 MiB of
// pseudo-random bytes each way, each followed by fin, and compares them. Exit 0 when both arrive
// intact, 1 on any failure, 77 when no RDMA device exists.
// usage: fedgate_verbs_loopback [DEVICE [PORT [GID_INDEX]]]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "drivers/verbs.hpp"

namespace {

constexpr std::size_t kBytes = 64u << 20;
constexpr std::size_t kReadPiece = 100000;  // not a divisor of the ring: reads cross its end
constexpr int kSkip = 77;

std::vector<uint8_t> random_bytes(std::size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> out(n);
    for (auto& b : out) b = static_cast<uint8_t>(rng());
    return out;
}

std::vector<uint8_t> read_to_end(fedgate::Connection& c) {
    std::vector<uint8_t> got, buf(kReadPiece);
    while (const std::size_t n = c.recv_some(buf)) got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(n));
    return got;
}

// a sends, then reads what b sends back; b reads, then sends. Returns an error text, empty if fine.
std::string run(fedgate::RdmaConnection& a, fedgate::RdmaConnection& b) {
    const auto a_to_b = random_bytes(kBytes, 1), b_to_a = random_bytes(kBytes, 2);
    std::vector<uint8_t> got_a, got_b;
    std::string err_a, err_b;
    std::thread ta([&] {
        try {
            a.send_all(a_to_b);
            a.shutdown_send();
            got_a = read_to_end(a);
        } catch (const std::exception& e) { err_a = e.what(); }
    });
    std::thread tb([&] {
        try {
            got_b = read_to_end(b);
            b.send_all(b_to_a);
            b.shutdown_send();
        } catch (const std::exception& e) { err_b = e.what(); }
    });
    ta.join();
    tb.join();
    if (!err_a.empty() || !err_b.empty()) return "a: " + err_a + " b: " + err_b;
    if (got_b != a_to_b) return "a->b: " + std::to_string(got_b.size()) + " bytes arrived, not the ones sent";
    if (got_a != b_to_a) return "b->a: " + std::to_string(got_a.size()) + " bytes arrived, not the ones sent";
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    fedgate::RdmaOptions options;
    if (argc > 1) options.device = argv[1];
    if (argc > 2) options.port = static_cast<uint8_t>(std::atoi(argv[2]));
    if (argc > 3) options.gid_index = static_cast<uint32_t>(std::atoi(argv[3]));
    std::string error;
    const auto dev = fedgate::RdmaDevice::open(fedgate::real_verbs(), options, error);
    if (!dev) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return error.rfind("no RDMA device:", 0) == 0 ? kSkip : 1;
    }
    auto a = fedgate::RdmaConnection::prepare(*dev, error);
    auto b = a ? fedgate::RdmaConnection::prepare(*dev, error) : nullptr;
    if (!a || !b) {
        std::fprintf(stderr, "prepare: %s\n", error.c_str());
        return 1;
    }
    const auto pa = fedgate::ProcessId::make(1, 1, 1), pb = fedgate::ProcessId::make(1, 1, 2);
    fedgate::RdmaConnection::Stage stage{};
    if (!a->connect(b->local(), pa, pb, 1, error, &stage) || !b->connect(a->local(), pb, pa, 1, error, &stage)) {
        std::fprintf(stderr, "connect (%s): %s\n", fedgate::RdmaConnection::stage_name(stage), error.c_str());
        return 1;
    }
    if (const std::string e = run(*a, *b); !e.empty()) {
        std::fprintf(stderr, "FAIL: %s\n", e.c_str());
        return 1;
    }
    std::printf("ok: %zu bytes each way over %s port %u (GID %s, MTU %u)\n", kBytes, dev->name().c_str(), dev->port(),
                fedgate::format_gid(dev->gid()).c_str(), a->path_mtu());
    return 0;
}
