// The gateway: one facade over everything a running fedgated owns — the EAL, its ports, the
// data-plane lcore, the control threads and the management socket.
#pragma once

#include <nlohmann/json.hpp>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/config.hpp"
#include "dataplane/dataplane.hpp"
#include "drivers/port.hpp"

struct rte_mempool;
struct rte_ring;
struct rte_rcu_qsbr;

namespace fedgate {

class MgmtServer;
class MetricsServer;
class Pinger;
class PortMapTable;
class AutoMappings;
class CaptureService;
class ResolutionService;
class ResolveCache;

// The most entries one listing request (session_list, dir_list) returns; telemetry pages within it.
inline constexpr uint32_t kMaxListed = 100'000;

class Gateway {
public:
    explicit Gateway(Config cfg);
    ~Gateway();
    Gateway(const Gateway&) = delete;
    Gateway& operator=(const Gateway&) = delete;

    // Initialises the EAL and brings everything up, runs until `quit` turns true, then tears down in
    // order. Returns the process exit code; start-up failures are logged with their cause.
    int run(const std::atomic<bool>& quit);

    // One management request (already parsed); returns the result object or throws with a message.
    nlohmann::ordered_json handle(const nlohmann::ordered_json& request);

private:
    void start();   // throws std::runtime_error on any start-up failure
    void stop();
    void punt_loop(const std::atomic<bool>& quit);

    nlohmann::ordered_json status() const;
    nlohmann::ordered_json stats() const;
    nlohmann::ordered_json ping(const nlohmann::ordered_json& request);
    nlohmann::ordered_json session_list(const nlohmann::ordered_json& request);
    nlohmann::ordered_json resolve(const nlohmann::ordered_json& request);
    nlohmann::ordered_json dir(const nlohmann::ordered_json& request);
    nlohmann::ordered_json conn_list(const nlohmann::ordered_json& request);
    nlohmann::ordered_json resolution_stats() const;
    nlohmann::ordered_json log_level(const nlohmann::ordered_json& request);
    void apply_log_config();  // [log]: after the EAL has registered its types
    // Hands `r` to the lcore and waits until it is done; throws MgmtError if it takes too long.
    std::unique_ptr<DpRequest> ask_lcore(std::unique_ptr<DpRequest> r, std::chrono::milliseconds timeout);
    // One resolution datagram from our resolution port, routed like any packet the control threads send.
    void send_udp(uint32_t dst, uint16_t dst_port, std::span<const uint8_t> datagram);
    uint64_t now_ms() const;  // the lcore's clock

    Config cfg_;
    std::chrono::steady_clock::time_point started_;
    bool eal_up_ = false;
    rte_mempool* pool_ = nullptr;
    rte_ring* punt_ = nullptr;
    rte_ring* inject_ = nullptr;
    rte_ring* requests_ = nullptr;
    rte_ring* events_ = nullptr;
    rte_rcu_qsbr* rcu_ = nullptr;
    std::unique_ptr<ResolveCache> cache_;
    std::unique_ptr<ResolutionService> resolution_;
    std::unique_ptr<AutoMappings> auto_maps_;
    std::unique_ptr<CaptureService> capture_;  // fedgatectl capture
    bool pdump_ = false;                       // rte_pdump_init done (hugepages, shared config)  // the tcp transport's mappings, which resolution_ asks for
    std::unique_ptr<PortMapView> maps_;
    std::unique_ptr<PortMapTable> table_;
    std::vector<PortHandle> ports_;
    std::vector<DpPortConfig> dp_ports_;
    std::unique_ptr<Dataplane> dp_;
    std::unique_ptr<Pinger> pinger_;
    std::unique_ptr<MgmtServer> mgmt_;
    std::unique_ptr<MetricsServer> metrics_;  // null unless [metrics] listen is set
    std::thread punt_thread_;
    std::atomic<bool> stop_control_{false};
    unsigned dp_lcore_ = 0;
    cpu_set_t control_cpus_{};  // where control threads run: the process's CPUs less the data plane's
};

}  // namespace fedgate
