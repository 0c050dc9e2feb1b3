// The gateway: one facade over everything a running fedgated owns — the EAL, its ports, the
// data-plane lcores, the control threads and the management socket. It starts and stops them and
// runs the punt loop; the management commands are Commands' (commands.hpp), the running config and
// its reload LiveConfig's (live_config.hpp).
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/commands.hpp"
#include "controlplane/config.hpp"
#include "controlplane/live_config.hpp"
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

    // The data-plane workers, for the commands and the counter table to read.
    std::vector<const Dataplane*> workers() const;
    // Gives every worker the peer table of `c` (a reload's first step); throws MgmtError if one does
    // not take it in time.
    void set_worker_peers(const Config& c);
    // Hands `r` to worker `w` and waits until it is done; throws MgmtError if it takes too long.
    // Every session the workers hold, as opened events, a page per request to each worker: what a
    // member asking for a resync gets. Stops when `page` returns false; throws when a worker does not answer.
    void dump_session_events(const std::function<bool(std::span<const SessionEvent>)>& page);
    std::unique_ptr<DpRequest> ask_lcore(std::unique_ptr<DpRequest> r, std::chrono::milliseconds timeout,
                                         std::size_t w = 0);
    // Picks the lcores of [dataplane] workers from the EAL's; throws naming the setting when short.
    void pick_lcores();
    // One resolution datagram from our resolution port, routed like any packet the control threads send.
    void send_udp(uint32_t dst, uint16_t dst_port, std::span<const uint8_t> datagram);
    uint64_t now_ms() const;  // the lcore's clock

    // As started. A reload refuses any change to what the running gateway was built from, so every
    // field but peers, mappings and [log] stays true; those are read from live_.
    const Config cfg_;
    LiveConfig live_;
    std::atomic<bool>* reload_requested_ = nullptr;
    std::chrono::steady_clock::time_point started_;
    bool eal_up_ = false;
    rte_mempool* pool_ = nullptr;
    rte_ring* punt_ = nullptr;
    rte_ring* inject_ = nullptr;
    std::vector<rte_ring*> requests_;  // one per worker
    std::vector<rte_ring*> handoff_;   // one per worker when there are several
    rte_ring* events_ = nullptr;
    rte_ring* session_events_ = nullptr;  // [cluster] sync only
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
    std::unique_ptr<Commands> commands_;  // what mgmt_, metrics_ and telemetry ask
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
