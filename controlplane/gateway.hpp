// The gateway: one facade over everything a running fedgated owns — the EAL, its ports, the
// data-plane lcore, the control threads and the management socket.
#pragma once

#include <nlohmann/json.hpp>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
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
class RoceTranslations;
class CaptureService;
class ResolutionService;
class ResolveCache;
class ClusterService;

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
    // `reload_requested` (may be null): set by a SIGHUP handler; a control thread then reloads the
    // config as `fedgatectl reload` does, logging the outcome.
    int run(const std::atomic<bool>& quit, std::atomic<bool>* reload_requested = nullptr);

    // One management request (already parsed); returns the result object or throws with a message.
    nlohmann::ordered_json handle(const nlohmann::ordered_json& request);

private:
    void start();   // throws std::runtime_error on any start-up failure
    void stop();
    void punt_loop(const std::atomic<bool>& quit);
    // systemd (controlplane/service.hpp): READY once every port has link and the management socket
    // answers, then the watchdog, fed while every worker's loop goes round. Until stop_control_.
    void service_loop();
    bool mgmt_answers() const;  // a status request on our own socket gets an ok reply
    std::string summary() const;  // "party P (id N): K ports up, W workers, M peers"

    // Sleeps until the lcore rings the punt thread's doorbell or `deadline_ms` (the lcore's clock) comes.
    void wait_for_punts(uint64_t deadline_ms);

    nlohmann::ordered_json status() const;
    nlohmann::ordered_json stats() const;
    // The data-plane workers, for the counter table to sum (counter_table.hpp).
    std::vector<const Dataplane*> workers() const;
    nlohmann::ordered_json ping(const nlohmann::ordered_json& request);
    nlohmann::ordered_json session_list(const nlohmann::ordered_json& request);
    nlohmann::ordered_json resolve(const nlohmann::ordered_json& request);
    nlohmann::ordered_json dir(const nlohmann::ordered_json& request);
    nlohmann::ordered_json conn_list(const nlohmann::ordered_json& request);
    nlohmann::ordered_json log_level(const nlohmann::ordered_json& request);
    void apply_log_config(const LogSettings& l);  // [log]: after the EAL has registered its types
    // `fedgatectl reload`: re-reads cfg_.source and applies its peers, mappings and log levels, or
    // refuses the whole file (a parse error, or a change only a restart can make) changing nothing.
    nlohmann::ordered_json reload();
    // The config as the last reload left it. Only peers, mappings and log levels ever differ from
    // cfg_; a reader that needs them takes this snapshot, which never changes under it.
    std::shared_ptr<const Config> live() const;
    // Hands `r` to worker `w` and waits until it is done; throws MgmtError if it takes too long.
    std::unique_ptr<DpRequest> ask_lcore(std::unique_ptr<DpRequest> r, std::chrono::milliseconds timeout,
                                         std::size_t w = 0);
    // Picks the lcores of [dataplane] workers from the EAL's; throws naming the setting when short.
    void pick_lcores();
    // One resolution datagram from our resolution port, routed like any packet the control threads send.
    void send_udp(uint32_t dst, uint16_t dst_port, std::span<const uint8_t> datagram);
    uint64_t now_ms() const;  // the lcore's clock

    // As started. A reload refuses any change to what the running gateway was built from, so every
    // field but peers, mappings and [log] stays true; those are read from live().
    const Config cfg_;
    mutable std::mutex live_mu_;
    std::shared_ptr<const Config> live_;  // under live_mu_
    std::mutex reload_mu_;                // one reload at a time
    std::atomic<bool>* reload_requested_ = nullptr;
    std::chrono::steady_clock::time_point started_;
    bool eal_up_ = false;
    rte_mempool* pool_ = nullptr;
    rte_ring* punt_ = nullptr;
    rte_ring* inject_ = nullptr;
    std::vector<rte_ring*> requests_;  // one per worker
    std::vector<rte_ring*> handoff_;   // one per worker when there are several
    rte_ring* events_ = nullptr;
    rte_rcu_qsbr* rcu_ = nullptr;
    std::unique_ptr<ResolveCache> cache_;
    std::unique_ptr<ResolutionService> resolution_;
    std::unique_ptr<AutoMappings> auto_maps_;
    std::unique_ptr<RoceTranslations> roce_;
    std::unique_ptr<CaptureService> capture_;  // fedgatectl capture
    bool pdump_ = false;                       // rte_pdump_init done (hugepages, shared config)  // the tcp transport's mappings, which resolution_ asks for
    std::unique_ptr<PortMapView> maps_;
    std::unique_ptr<PortMapTable> table_;
    std::unique_ptr<ClusterService> cluster_;  // null unless [cluster] names a store
    std::atomic<bool> standby_{true};          // the workers' DpShared::standby while cluster_ is set
    std::vector<PortHandle> ports_;
    std::vector<DpPortConfig> dp_ports_;
    std::vector<std::unique_ptr<Dataplane>> dps_;  // the workers; dps_[0] takes injected packets
    std::unique_ptr<Pinger> pinger_;
    std::unique_ptr<MgmtServer> mgmt_;
    std::unique_ptr<MetricsServer> metrics_;  // null unless [metrics] listen is set
    std::thread punt_thread_;
    std::thread service_thread_;  // service_loop
    ControlWake wake_;  // the punt thread's doorbell (its eventfd is made in start())
    std::unique_ptr<LcoreWake[]> bells_;  // each worker's doorbell (eventfds made in start())
    std::size_t bell_count_ = 0;
    std::atomic<bool> stop_control_{false};
    std::vector<unsigned> dp_lcores_;  // worker i runs on dp_lcores_[i]
    cpu_set_t control_cpus_{};  // where control threads run: the process's CPUs less the data plane's
};

}  // namespace fedgate
