// The RoCE v2 translation's speed on the data plane, under a real EAL on the vdevs of
// tests/bench/roce_bench.sh (net_pcap infinite_rx in, net_null out): one RDMA connection is installed
// the way the relay installs it (RoceTranslations), and the lcore translates node -> peer gateway.
//
//   fedgate_bench_roce pcap FILE PAYLOAD COUNT   writes COUNT RC SEND MIDDLE packets of PAYLOAD bytes
//                                                 from the node to the vQPN the run will hand out
//   fedgate_bench_roce run FILE SECONDS EAL_MB    forwards on lcore 1 for SECONDS (the first 2 warm
//                                                 up) and prints "roce_pps PPS rx RX drops DROPS"
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/roce_translations.hpp"
#include "dataplane/dataplane.hpp"
#include "drivers/port.hpp"
#include "tests/support/packet_builder.hpp"
#include "tests/support/pcap_file.hpp"

namespace {

using namespace fedgate;

constexpr const char* kInternal = "198.18.1.1";
constexpr const char* kExternal = "198.19.0.1";
constexpr const char* kNode = "198.18.1.10";
constexpr const char* kPeer = "198.19.0.2";
constexpr uint32_t kNodeQpn = 0x123, kPeerVqpn = 0x777;
constexpr uint32_t kSeed = 7;  // the same vQPNs when the pcap is written and when it is replayed

uint32_t be(const char* s) { return htonl(test::ip(s)); }

std::vector<DpPortConfig> ports(uint16_t in_id, rte_ether_addr in_mac, uint16_t ex_id, rte_ether_addr ex_mac) {
    std::vector<DpPortConfig> pc(2);
    pc[0] = {in_id, PortRole::internal, in_mac, be(kInternal), 24, 0, {}};
    pc[1] = {ex_id, PortRole::external, ex_mac, be(kExternal), 24, 0, {{be(kPeer), MacAddr{0x02, 0, 0, 0, 0, 0x02}}}};
    return pc;
}

// The connection the relay would install; the first vQPNs of a fresh table seeded kSeed.
RoceConn connection(RoceTranslations& t) {
    RoceConn c;
    c.conn_id = 1;
    c.initiator = c.local = ProcessId::make(1, 3, 100);
    c.target = c.remote = ProcessId::make(2, 7, 42);
    c.peer_party = 2;
    c.node_addr = test::ip(kNode);
    c.node_qpn = kNodeQpn;
    c.peer_addr = test::ip(kPeer);
    c.peer_vqpn = kPeerVqpn;
    c.internal_vqpn = *t.reserve(RoceSide::internal);
    c.external_vqpn = *t.reserve(RoceSide::external);
    return c;
}

int write_pcap(const std::string& file, unsigned long payload, unsigned long count) {
    if (payload > 4096 || count < 1 || count > 65536) {
        std::cerr << "fedgate_bench_roce: PAYLOAD must be 0..4096 and COUNT 1..65536\n";
        return 2;
    }
    RoceTranslations t(4, ports(0, {}, 1, {}), [] {}, kSeed);
    const RoceConn c = connection(t);
    std::vector<std::vector<uint8_t>> frames;
    for (unsigned long i = 0; i < count; ++i)
        // Broadcast destination: the vdev's MAC is not known before the run; both forwarders take it.
        frames.push_back(test::PacketBuilder()
                             .eth(test::kBroadcast, {0x02, 0, 0, 1, 0, 0x0a})
                             .ipv4(kNode, kInternal, 64, static_cast<uint16_t>(i))
                             .udp(static_cast<uint16_t>(49152 + i % 4096), kRoceV2Port)
                             .udp_no_checksum()
                             .bth(0x01, c.internal_vqpn, static_cast<uint32_t>(i))  // RC SEND MIDDLE
                             .payload(payload, static_cast<uint8_t>(i))
                             .icrc()
                             .build());
    return test::write_pcap(file, frames) ? 0 : 1;
}

std::atomic<bool> g_quit{false};

int run(const std::string& file, unsigned long seconds, unsigned long mb) {
    const std::string prefix = "fgroce-" + std::to_string(::getpid());
    std::vector<std::string> args{"bench_roce", "-l", "0,1", "--no-huge", "--no-shconf", "-m", std::to_string(mb),
                                  "--no-pci", "--file-prefix", prefix, "--log-level", "lib.eal:error"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
        std::cerr << "fedgate_bench_roce: EAL init failed\n";
        return 1;
    }
    rte_mempool* pool = rte_pktmbuf_pool_create("bench_mbufs", 16383, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    if (pool == nullptr) {
        std::cerr << "fedgate_bench_roce: no mbuf pool (raise EAL_MB)\n";
        return 1;
    }
    const PortHandle in = bring_up_port(PortSetup{"internal", "net_pcap0,rx_pcap=" + file + ",infinite_rx=1"}, pool);
    const PortHandle ex = bring_up_port(PortSetup{"external", "net_null0,no-rx=1"}, pool);
    const auto pc = ports(in.port_id, in.mac, ex.port_id, ex.mac);
    RoceTranslations t(4, pc, [] {}, kSeed);
    const RoceConn c = connection(t);
    if (!t.install(c, 0)) {
        std::cerr << "fedgate_bench_roce: cannot install the translation\n";
        return 1;
    }
    DataplaneConfig cfg;
    cfg.idle.spin = true;
    Dataplane dp(cfg, pc, pool, DpRings{}, DpShared{nullptr, nullptr, 0, nullptr, &t.view()});
    rte_eal_remote_launch(
        [](void* arg) {
            static_cast<Dataplane*>(arg)->run(g_quit);
            return 0;
        },
        &dp, 1);
    using Clock = std::chrono::steady_clock;
    std::this_thread::sleep_for(std::chrono::seconds(2));  // warm-up, as testpmd's first periods
    const auto t0 = Clock::now();
    const uint64_t tx0 = dp.port_counters(1).tx_packets.get();
    std::this_thread::sleep_for(std::chrono::seconds(seconds > 2 ? seconds - 2 : 1));
    const uint64_t tx1 = dp.port_counters(1).tx_packets.get();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    g_quit.store(true);
    rte_eal_mp_wait_lcore();
    const uint64_t drops = dp.port_counters(0).total_drops() + dp.port_counters(1).total_drops();
    std::cout << "roce_pps " << static_cast<uint64_t>(static_cast<double>(tx1 - tx0) / dt) << " rx "
              << dp.port_counters(0).rx_packets.get() << " drops " << drops << " translated "
              << t.view().find(RoceSide::internal, c.internal_vqpn)->packets.get() << "\n";
    close_port(in);
    close_port(ex);
    rte_eal_cleanup();
    // The EAL leaves its (empty, with --no-shconf) runtime directory behind: one per run otherwise.
    std::filesystem::remove_all("/var/run/dpdk/" + prefix);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    try {
        if (mode == "pcap" && argc == 5) return write_pcap(argv[2], std::stoul(argv[3]), std::stoul(argv[4]));
        if (mode == "run" && argc == 5) return run(argv[2], std::stoul(argv[3]), std::stoul(argv[4]));
    } catch (const std::exception& e) {
        std::cerr << "fedgate_bench_roce: " << e.what() << "\n";
        return 1;
    }
    std::cerr << "usage: fedgate_bench_roce pcap FILE PAYLOAD COUNT | run FILE SECONDS EAL_MB\n";
    return 2;
}
