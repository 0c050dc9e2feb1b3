// Gateway start-up and shutdown, the punt loop, and what the control threads send.
#include "controlplane/gateway.hpp"
#include "controlplane/service.hpp"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pdump.h>
#include <rte_rcu_qsbr.h>
#include <rte_pdump.h>
#include <rte_ring.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <pthread.h>
#include <sched.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "controlplane/log.hpp"
#include "controlplane/metrics.hpp"
#include "controlplane/mgmt_server.hpp"
#include "controlplane/pinger.hpp"
#include "controlplane/auto_mapping.hpp"
#include "controlplane/capture.hpp"
#include "controlplane/cluster.hpp"
#include "controlplane/session_sync.hpp"
#include "controlplane/store_writers.hpp"
#include "controlplane/portmap_table.hpp"
#include "controlplane/resolution.hpp"
#include "controlplane/telemetry.hpp"

#include <rte_udp.h>

namespace fedgate {
namespace {

constexpr unsigned kRingSize = 1024;
// The punt ring's size is [dataplane] punt_ring: it takes bursts of registrations (a job starting
// thousands of processes at once).
constexpr unsigned kRequestRingSize = 64;
constexpr unsigned kHandOffRingSize = 4096;
static_assert(kMaxWorkersCfg == kMaxWorkers);
constexpr unsigned kMempoolCache = 256;
constexpr unsigned kEventRingSize = 4096;
constexpr unsigned kSessionEventRingSize = 16384;  // the sync thread drains it every 20 ms at most
constexpr uint32_t kResolveTickMs = 10;
// Empty polls the punt thread makes before it sleeps on its doorbell: a reply that follows at once
// (the next message of a handshake) is taken without a sleep and a wake-up.
constexpr uint32_t kPuntSpinPolls = 64;

constexpr int kControlWorkers = 4;

// Control work runs in its own arena with no slot kept for the calling thread, so requests are
// served by TBB workers. The EAL pins the process to the data-plane cores, which would leave TBB
// no workers at all; the global limit is raised explicitly.
tbb::task_arena& control_arena() {
    static tbb::global_control limit(tbb::global_control::max_allowed_parallelism, kControlWorkers + 1);
    static tbb::task_arena arena(kControlWorkers, 0);
    return arena;
}

// Runs `spawn` with the calling thread moved to `cpus`, so threads it creates inherit them, then
// moves the calling thread back.
template <typename F>
void with_affinity(const cpu_set_t& cpus, F&& spawn) {
    cpu_set_t saved;
    pthread_getaffinity_np(pthread_self(), sizeof saved, &saved);
    pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
    spawn();
    pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
}

int dataplane_lcore_main(void* arg) {
    auto* args = static_cast<std::pair<Dataplane*, const std::atomic<bool>*>*>(arg);
    args->first->run(*args->second);
    return 0;
}

}  // namespace

Gateway::Gateway(Config cfg)
    : cfg_(std::move(cfg)), live_(cfg_), started_(std::chrono::steady_clock::now()) {}

Gateway::~Gateway() { stop(); }

int Gateway::run(const std::atomic<bool>& quit, std::atomic<bool>* reload_requested) {
    reload_requested_ = reload_requested;
    try {
        start();
    } catch (const std::exception& e) {
        FG_LOG(ERR, gateway, "start-up failed: %s", e.what());
        stop();
        return 1;
    }
    std::string lcores;
    for (const unsigned l : dp_lcores_) lcores += (lcores.empty() ? "" : ",") + std::to_string(l);
    FG_LOG(INFO, gateway, "party %s (id %u) up: %zu ports, %zu data-plane worker(s) on lcore(s) %s, socket %s",
           cfg_.party.c_str(), cfg_.party_id, ports_.size(), dps_.size(), lcores.c_str(), cfg_.socket.c_str());

    // Control threads (and TBB's workers, created from them) keep off the data-plane core.
    with_affinity(control_cpus_, [this] {
        control_arena().initialize();
        punt_thread_ = std::thread([this] { punt_loop(stop_control_); });
        mgmt_->start();
        if (metrics_) metrics_->start();
        if (cluster_)
            cluster_->start(table_.get(), [this](bool active) {
                // The group's addresses follow the active member: the workers stop or start
                // sending, and announce the addresses with gratuitous ARP when they start.
                standby_.store(!active, std::memory_order_release);
                for (std::size_t w = 0; w < bell_count_; ++w) bells_[w].ring();
                if (!active) return;
                // Traffic first (the workers announce the addresses now), then the directory: a few
                // thousand processes take most of a second to read and publish, and the peers keep
                // answering lookups from their caches meanwhile.
                try {
                    const uint64_t t0 = now_ms();
                    const std::size_t n = resolution_->take_over(t0);
                    FG_LOG(NOTICE, gateway, "cluster: took up %zu process(es) from the store in %llu ms", n,
                           static_cast<unsigned long long>(now_ms() - t0));
                } catch (const std::exception& e) {
                    FG_LOG(ERR, gateway, "cluster: cannot read the directory from the store: %s", e.what());
                }
            });
        service_thread_ = std::thread([this] { service_loop(); });
    });

    std::vector<std::pair<Dataplane*, const std::atomic<bool>*>> args;
    for (const auto& dp : dps_) args.emplace_back(dp.get(), &quit);
    if (dp_lcores_[0] == rte_get_main_lcore()) {
        dps_[0]->run(quit);  // one worker and no worker lcore: it shares the main lcore
    } else {
        for (std::size_t i = 0; i < dps_.size(); ++i) rte_eal_remote_launch(dataplane_lcore_main, &args[i], dp_lcores_[i]);
        // rte_eal_wait_lcore spins; the main lcore has nothing to do until a signal, so it naps.
        while (!quit.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (const unsigned l : dp_lcores_) rte_eal_wait_lcore(l);
    }
    FG_LOG(INFO, gateway, "stopping");
    service::stopping();
    stop();
    return 0;
}

std::string Gateway::summary() const {
    std::size_t up = 0;
    for (const PortHandle& p : ports_) up += link_state(p.port_id).up ? 1 : 0;
    return "party " + cfg_.party + " (id " + std::to_string(cfg_.party_id) + "): " + std::to_string(up) + " of " +
           std::to_string(ports_.size()) + " ports up, " + std::to_string(dps_.size()) + " worker(s), " +
           std::to_string(live_.snapshot()->peers.size()) + " peer(s)";
}

bool Gateway::mgmt_answers() const {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, cfg_.socket.c_str(), sizeof addr.sun_path - 1);
    const timeval tv{1, 0};  // a ready daemon answers status in microseconds
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string reply;
    static constexpr char kRequest[] = "{\"cmd\":\"status\"}\n";
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
        ::send(fd, kRequest, sizeof kRequest - 1, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof kRequest - 1)) {
        char buf[4096];
        ssize_t n;
        while (reply.find('\n') == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0)
            reply.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return reply.rfind("{\"ok\":true", 0) == 0;
}

void Gateway::service_loop() {
    const auto nap = [this](std::chrono::milliseconds d) {  // in steps, so a stop is seen within 100 ms
        const auto until = std::chrono::steady_clock::now() + d;
        while (!stop_control_.load() && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
                std::chrono::milliseconds(100), until - std::chrono::steady_clock::now()));
    };
    std::string waiting, said;
    while (!stop_control_.load()) {
        waiting.clear();
        for (std::size_t i = 0; i < ports_.size() && waiting.empty(); ++i)
            if (!link_state(ports_[i].port_id).up) waiting = "waiting for link on port " + cfg_.ports[i].name;
        if (waiting.empty() && !mgmt_answers()) waiting = "waiting for the management socket " + cfg_.socket;
        if (waiting.empty()) break;
        if (waiting != said) {
            FG_LOG(INFO, gateway, "not ready yet: %s", waiting.c_str());
            service::status(waiting);
            said = waiting;
        }
        nap(std::chrono::milliseconds(100));
    }
    if (stop_control_.load()) return;
    const std::string ready = summary();
    service::ready(ready);
    FG_LOG(INFO, gateway, "ready: %s", ready.c_str());

    const uint64_t usec = service::watchdog_usec();
    if (usec == 0) return;
    // Fed twice per interval, each time only if every worker's loop went round since the last.
    const auto every = std::chrono::milliseconds(std::max<uint64_t>(usec / 2000, 10));
    FG_LOG(INFO, gateway, "watchdog: every %lld ms while the data plane makes progress",
           static_cast<long long>(every.count()));
    ProgressCheck check;
    bool stalled = false;
    std::vector<uint64_t> loops(dps_.size());
    while (!stop_control_.load()) {
        for (std::size_t w = 0; w < dps_.size(); ++w) loops[w] = dps_[w]->counters().polls.get();
        if (const int stuck = check.stalled(loops); stuck < 0) {
            service::watchdog();
            if (stalled) {
                FG_LOG(NOTICE, gateway, "the data plane makes progress again: feeding the watchdog");
                service::status(summary());
            }
            stalled = false;
        } else if (!stalled) {
            FG_LOG(ERR, gateway, "data-plane worker %d (lcore %u) made no progress in %lld ms: not feeding the watchdog",
                   stuck, dp_lcores_[static_cast<std::size_t>(stuck)], static_cast<long long>(every.count()));
            service::status("data-plane worker " + std::to_string(stuck) + " stuck");
            stalled = true;
        }
        nap(every);
    }
}

// The peers as the lcores check their messages: address, party and keys.
static std::vector<DpPeer> dp_peers(const Config& c) {
    std::vector<DpPeer> out;
    for (const PeerConfig& p : c.peers)
        out.push_back(DpPeer{rte_cpu_to_be_32(p.address), p.party_id, p.key, p.key_id, p.next_key, p.next_key_id});
    return out;
}

// One lcore's share of the per-peer MAC-check budget (each worker checks its own messages).
static PeerVerifyLimit peer_verify_limit(const ResolveSettings& rs, std::size_t workers) {
    const uint32_t n = static_cast<uint32_t>(std::max<std::size_t>(1, workers));
    if (rs.peer_verify_rate == 0) return {};
    return {std::max<uint32_t>(1, rs.peer_verify_rate / n), std::max<uint32_t>(1, rs.peer_verify_burst / n)};
}

void Gateway::start() {
    std::error_code ec;
    std::filesystem::create_directories(cfg_.state_dir, ec);
    if (ec) throw std::runtime_error("state_dir '" + cfg_.state_dir + "': " + ec.message());
    std::filesystem::create_directories(std::filesystem::path(cfg_.socket).parent_path(), ec);
    if (ec) throw std::runtime_error("socket directory for '" + cfg_.socket + "': " + ec.message());

    sched_getaffinity(0, sizeof control_cpus_, &control_cpus_);
    std::vector<std::string> args{"fedgated"};
    args.insert(args.end(), cfg_.eal_args.begin(), cfg_.eal_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0)
        throw std::runtime_error(std::string("EAL init failed (eal.args): ") + rte_strerror(rte_errno));
    eal_up_ = true;
    log_types();
    apply_log_config(cfg_.log);
    // With hugepages and a shared config, dpdk-dumpcap and dpdk-pdump attach as a secondary process;
    // with --no-huge or --no-shconf they cannot, and `fedgatectl capture` is the way.
    const bool shared = std::none_of(cfg_.eal_args.begin(), cfg_.eal_args.end(),
                                     [](const std::string& a) { return a == "--no-shconf" || a == "--in-memory"; });
    if (rte_eal_has_hugepages() != 0 && shared) {
        pdump_ = rte_pdump_init() == 0;
        FG_LOG(INFO, gateway, "rte_pdump %s", pdump_ ? "enabled: dpdk-dumpcap can attach" : "could not be enabled");
    }

    pick_lcores();
    const uint16_t workers = static_cast<uint16_t>(dp_lcores_.size());
    const int socket = static_cast<int>(rte_lcore_to_socket_id(dp_lcores_[0]));
    cpu_set_t others = control_cpus_;
    for (const unsigned l : dp_lcores_) {
        const rte_cpuset_t dp_cpus = rte_lcore_cpuset(l);
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &dp_cpus)) CPU_CLR(c, &others);
    }
    if (CPU_COUNT(&others) > 0) control_cpus_ = others;  // else the data plane and control share

    pool_ = rte_pktmbuf_pool_create("fg_mbufs", cfg_.dataplane.mbufs, kMempoolCache, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                    socket);
    if (pool_ == nullptr)
        throw std::runtime_error("cannot create " + std::to_string(cfg_.dataplane.mbufs) +
                                 " mbufs (dataplane.mbufs; EAL memory -m): " + rte_strerror(rte_errno));
    // Every worker punts and reports events (multi-producer); worker 0 alone takes injected packets.
    const unsigned one_producer = workers == 1 ? RING_F_SP_ENQ : 0;
    punt_ = rte_ring_create("fg_punt", cfg_.dataplane.punt_ring, socket, one_producer | RING_F_SC_DEQ);
    inject_ = rte_ring_create("fg_inject", kRingSize, socket, RING_F_SC_DEQ);
    events_ = rte_ring_create_elem("fg_events", sizeof(ResolveEvent), kEventRingSize, socket, one_producer | RING_F_SC_DEQ);
    bool rings_ok = punt_ != nullptr && inject_ != nullptr && events_ != nullptr;
    if (cfg_.cluster.sync) {  // [cluster] sync: the sessions the workers open and close, for the other members
        session_events_ = rte_ring_create_elem("fg_sess_events", sizeof(SessionEvent), kSessionEventRingSize, socket,
                                               one_producer | RING_F_SC_DEQ);
        rings_ok = rings_ok && session_events_ != nullptr;
    }
    for (uint16_t w = 0; w < workers && rings_ok; ++w) {
        const std::string n = std::to_string(w);
        requests_.push_back(rte_ring_create(("fg_requests" + n).c_str(), kRequestRingSize, socket, RING_F_SC_DEQ));
        rings_ok = requests_.back() != nullptr;
        if (workers > 1 && rings_ok) {
            handoff_.push_back(rte_ring_create(("fg_handoff" + n).c_str(), kHandOffRingSize, socket, RING_F_SC_DEQ));
            rings_ok = handoff_.back() != nullptr;
        }
    }
    if (!rings_ok) throw std::runtime_error(std::string("cannot create the control rings: ") + rte_strerror(rte_errno));
    wake_.fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_.fd < 0)
        throw std::runtime_error(std::string("cannot create the punt thread's eventfd: ") + std::strerror(errno));
    // Each worker's doorbell: rung after a control request, an injected packet or a hand-off.
    bells_ = std::make_unique<LcoreWake[]>(workers);
    bell_count_ = workers;
    for (uint16_t w = 0; w < workers; ++w) {
        bells_[w].fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (bells_[w].fd < 0)
            throw std::runtime_error("cannot create worker " + std::to_string(w) + "'s eventfd: " + std::strerror(errno));
    }

    for (const PortConfig& pc : cfg_.ports) {
        PortSetup setup{pc.name, pc.device};
        setup.queues = workers;
        ports_.push_back(bring_up_port(setup, pool_));
        DpPortConfig d;
        d.port_id = ports_.back().port_id;
        d.role = pc.role == PortRoleCfg::external ? PortRole::external : PortRole::internal;
        d.mac = ports_.back().mac;
        d.addr = rte_cpu_to_be_32(pc.address.addr);
        d.prefix_len = pc.address.prefix_len;
        d.next_hop = pc.next_hop ? rte_cpu_to_be_32(*pc.next_hop) : 0;
        d.rss = ports_.back().rss;
        d.tx_cksum = ports_.back().tx_cksum;
        for (const auto& [ip, mac] : pc.static_neighbours) d.static_neighbours.emplace_back(rte_cpu_to_be_32(ip), mac);
        dp_ports_.push_back(d);
        FG_LOG(INFO, gateway, "port %s: %s (%s) port_id %u mac %s address %s", pc.name.c_str(), pc.device.c_str(),
               ports_.back().driver.c_str(), d.port_id, mac_str(d.mac).c_str(), pc.address.str().c_str());
    }

    DataplaneConfig dc;
    const DataplaneSettings& s = cfg_.dataplane;
    dc.idle = IdleConfig{.spin = s.idle_spin,
                         .empty_polls_before_sleep = s.idle_polls_before_sleep,
                         .max_sleep_us = s.idle_sleep_max_us,
                         .yield_us = s.idle_yield_us};
    dc.neighbour = NeighbourTimers{s.neighbour_reachable_s * 1000, s.neighbour_stale_s * 1000,
                                   s.arp_probe_interval_ms, s.arp_probes};
    dc.neighbour_capacity = s.neighbour_capacity;
    // TCP SYNs crossing the gateway announce no MSS larger than the smallest port MTU allows.
    uint16_t mtu = RTE_ETHER_MTU;
    for (const PortHandle& h : ports_) {
        uint16_t m = 0;
        if (rte_eth_dev_get_mtu(h.port_id, &m) == 0 && m >= 576) mtu = std::min(mtu, m);
    }
    const NatSettings& n = cfg_.nat;
    dc.nat.max_sessions = n.max_sessions;
    dc.nat.mss_clamp = static_cast<uint16_t>(mtu - 40);
    dc.nat.port_lo = n.port_lo;
    dc.nat.port_hi = n.port_hi;
    dc.nat.workers = workers;
    dc.nat.timeouts = NatTimeouts{n.tcp_established_s * 1000, n.tcp_transitory_s * 1000, n.udp_s * 1000,
                                  n.tcp_closing_s * 1000};

    // Port maps: the view the lcore reads, the RCU variable it reports to, and the table that
    // publishes config and run-time mappings into the view.
    const std::size_t rcu_size = rte_rcu_qsbr_get_memsize(workers);
    rcu_ = static_cast<rte_rcu_qsbr*>(std::aligned_alloc(RTE_CACHE_LINE_SIZE, RTE_ALIGN_CEIL(rcu_size, RTE_CACHE_LINE_SIZE)));
    if (rcu_ == nullptr || rte_rcu_qsbr_init(rcu_, workers) != 0)
        throw std::runtime_error("cannot set up RCU for the port maps");
    maps_ = std::make_unique<PortMapView>();
    std::vector<std::string> warnings;
    if (cfg_.cluster.enabled()) {
        // A group's member: the run-time mappings live in the store, not in the state file.
        cluster_ = std::make_unique<ClusterService>(cfg_);
        table_ = std::make_unique<PortMapTable>(cfg_, *maps_, rcu_, cluster_->take_map_state());
        FG_LOG(INFO, gateway, "cluster: member %s of party %s, store %s, lease %u s", cfg_.cluster.member.c_str(),
               cfg_.party.c_str(), cfg_.cluster.endpoints_text().c_str(), cfg_.cluster.lease_ttl_s);
    } else {
        table_ = std::make_unique<PortMapTable>(cfg_, *maps_, rcu_, cfg_.state_dir + "/mappings.json");
    }
    try {
        table_->load(&warnings);
    } catch (const MapError& e) {
        // A member starts without the store: the config's mappings now, the group's once the
        // store answers (the cluster loop reads them then).
        if (!cluster_ || e.field() != "store") throw std::runtime_error(std::string("port maps: ") + e.what());
        warnings.push_back(std::string("port maps: ") + e.what() + " (starting with the config's mappings)");
    }
    for (const std::string& w : warnings) FG_LOG(WARNING, gateway, "%s", w.c_str());
    FG_LOG(INFO, gateway, "port maps: %zu import, %zu export", table_->import_count(), table_->export_count());

    // The resolution service: the cache the lcore answers from, and its control side.
    const ResolveSettings& rs = cfg_.resolve;
    dc.resolve.port = rs.port;
    dc.resolve.max_skew_ns = uint64_t{rs.max_clock_skew_ms} * 1'000'000;
    dc.resolve.resolver = ResolverConfig{cfg_.party_id,          rs.pending_queries,         rs.query_timeout_ms,
                                         rs.broadcast_rate,       rs.broadcast_burst,         rs.requester_broadcast_rate,
                                         rs.requester_broadcast_burst, {}};
    dc.resolve.peers = dp_peers(cfg_);
    cache_ = std::make_unique<ResolveCache>(rs.cache_capacity);
    resolution_ = std::make_unique<ResolutionService>(
        cfg_, *cache_, [this](uint32_t dst, uint16_t port, std::span<const uint8_t> d) { send_udp(dst, port, d); },
        [this] { rte_rcu_qsbr_synchronize(rcu_, RTE_QSBR_THRID_INVALID); });
    auto_maps_ = std::make_unique<AutoMappings>(cfg_, *table_);
    resolution_->set_auto_mappings(auto_maps_.get());
    if (cluster_) {
        resolution_->set_directory_store(cluster_->directory_store());
        // Registrations go into the store on writer threads, several transactions at a time (each a
        // segment of up to 4,096 changes), and the punt thread collects them when a writer rings
        // its doorbell.
        resolution_->set_directory_writers(std::make_unique<StoreWriters>(cluster_->directory_writers(),
                                                                          [fd = wake_.fd] {
                                                                              const uint64_t one = 1;
                                                                              (void)!::write(fd, &one, sizeof one);
                                                                          }),
                                           StoreDirectory::kSegmentEntries);
        // A standby keeps a copy of the group's directory, so a takeover need not read it.
        cluster_->set_directory_warmer([r = resolution_.get()](std::vector<StoredProcess> all, std::string version) {
            r->warm(std::move(all), std::move(version));
        });
    }
    // RDMA between parties: the RoCE v2 translations the relay installs and the lcore applies. The
    // RDMA MTU is clamped to what the smallest port MTU carries.
    if (rs.port != 0) {
        roce_ = std::make_unique<RoceTranslations>(cfg_.connect.rdma_max_connections, dp_ports_,
                                                   [this] { rte_rcu_qsbr_synchronize(rcu_, RTE_QSBR_THRID_INVALID); });
        const uint16_t rdma_mtu = rdma_mtu_for_ip_mtu(mtu);
        resolution_->set_roce(roce_.get(), rdma_mtu);
        FG_LOG(INFO, gateway, "RoCE v2 translation: %u connections, RDMA MTU up to %u", roce_->capacity(), rdma_mtu);
    }

    // Broadcast budgets are the gateway's: each worker takes its share.
    dc.resolve.peer_verify = peer_verify_limit(rs, workers);
    dc.resolve.resolver.broadcast_rate = std::max<uint32_t>(1, rs.broadcast_rate / workers);
    dc.resolve.resolver.broadcast_burst = std::max<uint32_t>(1, rs.broadcast_burst / workers);
    for (uint16_t w = 0; w < workers; ++w) {
        DataplaneConfig wc = dc;
        wc.nat.worker = w;
        std::vector<LcoreWake*> bells;
        for (uint16_t b = 0; b < workers; ++b) bells.push_back(&bells_[b]);
        dps_.push_back(std::make_unique<Dataplane>(
            wc, dp_ports_, pool_,
            DpRings{punt_, w == 0 ? inject_ : nullptr, requests_[w], events_, &wake_, &bells_[w], session_events_},
            DpShared{maps_.get(), rcu_, w, cache_.get(), roce_ ? &roce_->view() : nullptr, cluster_ ? &standby_ : nullptr},
            DpWorker{w, workers, handoff_, std::move(bells)}));
    }
    if (cluster_ && cfg_.cluster.sync) {
        SessionSync::Io io;
        io.take = [r = session_events_](SessionEvent* out, std::size_t max) -> std::size_t {
            return rte_ring_sc_dequeue_burst_elem(r, out, sizeof(SessionEvent), static_cast<unsigned>(max), nullptr);
        };
        io.dump = [this](const SessionSync::Io::Page& page) { dump_session_events(page); };
        io.lost = [this] {
            uint64_t n = 0;
            for (const auto& dp : dps_) n += dp->nat_counters().session_events_lost.get();
            return n;
        };
        io.peers = [c = cluster_.get()] { return c->sync_peers(); };
        // The warm cache: the active's remote records go to a standby, which takes them while it
        // stands by (a copy that arrives after it took over would undo its own peers' snapshots).
        io.cache_dump = [this](uint64_t held) { return resolution_->remote_cache(now_ms(), held); };
        io.cache_install = [this](std::vector<CacheRecord> records, uint64_t version) {
            if (!standby_.load(std::memory_order_acquire)) return;
            const std::size_t n = resolution_->warm_cache(records, now_ms());
            FG_LOG(DEBUG, gateway, "cluster: %zu remote records from the active member (version %llu)", n,
                   static_cast<unsigned long long>(version));
        };
        cluster_->set_session_sync(std::make_unique<SessionSync>(
            cfg_.cluster.member, *cfg_.cluster.sync, std::size_t{cfg_.nat.max_sessions} * workers, std::move(io),
            cfg_.cluster.sync_key));
        FG_LOG(INFO, gateway, "cluster: session events on %s", cfg_.cluster.sync_text().c_str());
    }
    pinger_ = std::make_unique<Pinger>(pool_, inject_, dp_ports_, &bells_[0]);
    std::vector<CapturePort> capture_ports;
    for (std::size_t i = 0; i < ports_.size(); ++i)
        capture_ports.push_back({cfg_.ports[i].name, ports_[i].port_id, ports_[i].queues});
    capture_ = std::make_unique<CaptureService>(std::move(capture_ports), rcu_);
    live_.attach({[this](const Config& c) { set_worker_peers(c); }, table_.get(), resolution_.get(),
                  [this] { return now_ms(); }, [this] { return summary(); }});
    commands_ = std::make_unique<Commands>(Commands::Parts{
        cfg_, live_, ports_, this->workers(), dp_lcores_, started_, table_.get(), resolution_.get(), capture_.get(),
        cluster_.get(), pinger_.get(),
        [this](std::unique_ptr<DpRequest> r, std::chrono::milliseconds timeout, std::size_t w) {
            return ask_lcore(std::move(r), timeout, w);
        },
        [this] { return now_ms(); }});
    mgmt_ = std::make_unique<MgmtServer>(
        cfg_.socket, [c = commands_.get()](const nlohmann::ordered_json& r) { return c->handle(r); }, control_arena());

    // Prometheus: a kernel socket in the gateway's namespace, reading only what stats and status read.
    if (const auto& l = cfg_.metrics.listen)
        metrics_ = std::make_unique<MetricsServer>(
            l->first, l->second, [c = commands_.get()] { return render_prometheus(c->stats(), c->status()); });

    // DPDK telemetry (/fedgate/...): the same management requests, fitted to telemetry's limits.
    telemetry_attach([c = commands_.get()](const nlohmann::ordered_json& r) { return c->handle(r); });
}

void Gateway::stop() {
    telemetry_detach();  // first: waits for telemetry replies in flight, then none reach what goes below
    if (cluster_) cluster_->stop();  // resigns first: a standby takes over while we wind down
    stop_control_.store(true);
    if (service_thread_.joinable()) service_thread_.join();
    if (pinger_) pinger_->cancel();  // a ping in flight must not hold up the shutdown
    if (metrics_) metrics_->stop();  // before the management socket, and before what it reads goes
    metrics_.reset();
    if (mgmt_) mgmt_->stop();
    mgmt_.reset();
    commands_.reset();  // nothing asks it now
    capture_.reset();  // while the lcore still runs: removing its callbacks waits for it to pass them
    if (pdump_) rte_pdump_uninit();
    pdump_ = false;
    if (wake_.fd >= 0) {
        const uint64_t one = 1;
        (void)!::write(wake_.fd, &one, sizeof one);  // the punt thread sees stop_control_ now, not at its next tick
    }
    if (punt_thread_.joinable()) punt_thread_.join();
    if (resolution_) resolution_->stop_directory_writers();  // before the doorbell they ring is closed
    dps_.clear();
    if (wake_.fd >= 0) ::close(wake_.fd);  // no lcore left to write it
    wake_.fd = -1;
    for (std::size_t w = 0; w < bell_count_; ++w)
        if (bells_[w].fd >= 0) ::close(bells_[w].fd);
    bells_.reset();
    bell_count_ = 0;
    resolution_.reset();
    auto_maps_.reset();
    roce_.reset();   // no lcore left to read it
    cache_.reset();  // no lcore left to read it
    pinger_.reset();
    table_.reset();  // the data plane is gone: rules can be freed without a grace period
    cluster_.reset();
    maps_.reset();
    std::free(rcu_);
    rcu_ = nullptr;
    // Every ring that holds mbufs: the hand-off rings, punt and inject.
    std::vector<rte_ring*> mbuf_rings = std::move(handoff_);
    mbuf_rings.insert(mbuf_rings.end(), {punt_, inject_});
    for (rte_ring* r : mbuf_rings) {
        if (r == nullptr) continue;
        void* m;
        while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
        rte_ring_free(r);
    }
    handoff_.clear();
    // Requests still in the rings belong to callers that gave up waiting (the lcores stopped first);
    // nobody else holds them now.
    for (rte_ring* q : requests_) {
        void* r;
        while (q != nullptr && rte_ring_dequeue(q, &r) == 0) delete static_cast<DpRequest*>(r);
        rte_ring_free(q);
    }
    requests_.clear();
    rte_ring_free(events_);
    rte_ring_free(session_events_);
    punt_ = inject_ = events_ = session_events_ = nullptr;
    for (const PortHandle& p : ports_) close_port(p);
    ports_.clear();
    if (pool_ != nullptr) rte_mempool_free(pool_);
    pool_ = nullptr;
    if (eal_up_) rte_eal_cleanup();
    eal_up_ = false;
}

uint64_t Gateway::now_ms() const {
    // The lcores' clock (Dataplane's TickClock), so that a time one side stamps (the shared resolve
    // cache's) and the other reads later never reads as the future: the same function of the TSC.
    static const TickClock clock(rte_get_tsc_hz());
    return clock.ms(rte_get_tsc_cycles());
}

// The control side of the punt ring: hands each packet to whoever waits for it. The same thread
// drives the resolution service: punted registrations and peer messages, the lcore's events, timers.
void Gateway::punt_loop(const std::atomic<bool>& quit) {
    uint32_t empty_polls = 0;
    rte_mbuf* pkts[Dataplane::kBurst];
    const uint16_t resolve_port = rte_cpu_to_be_16(cfg_.resolve.port);
    resolution_->start(now_ms());
    uint64_t next_tick = 0;
    while (!quit.load()) {
        if (reload_requested_ != nullptr && reload_requested_->exchange(false)) {
            try {
                const nlohmann::ordered_json r = live_.reload();
                FG_LOG(NOTICE, gateway, "SIGHUP: reloaded %s: %zu change(s), %zu mapping(s) dropped",
                       cfg_.source.c_str(), r["changes"].size(), r["dropped"].size());
            } catch (const std::exception& e) {
                FG_LOG(ERR, gateway, "SIGHUP: %s", e.what());
            }
        }
        const unsigned n = rte_ring_sc_dequeue_burst(punt_, reinterpret_cast<void**>(pkts), Dataplane::kBurst, nullptr);
        for (unsigned i = 0; i < n; ++i) {
            ParsedPacket p;
            if (parse_packet(rte_pktmbuf_mtod(pkts[i], const uint8_t*), rte_pktmbuf_data_len(pkts[i]), p) !=
                DropReason::none) {
                rte_pktmbuf_free(pkts[i]);
                continue;
            }
            if (p.ip_proto == kIpProtoIcmp && p.icmp_type == RTE_IP_ICMP_ECHO_REPLY) {
                const auto* icmp = rte_pktmbuf_mtod_offset(pkts[i], const rte_icmp_hdr*, p.l4_offset);
                pinger_->on_echo_reply(p.src_ip, icmp->icmp_ident, icmp->icmp_seq_nb);
            } else if (p.ip_proto == kIpProtoUdp && p.dst_port == resolve_port) {
                resolution_->on_message(rte_be_to_cpu_32(p.src_ip), rte_be_to_cpu_16(p.src_port),
                                        {rte_pktmbuf_mtod_offset(pkts[i], const uint8_t*, p.payload_offset), p.payload_len},
                                        now_ms());
            }
            rte_pktmbuf_free(pkts[i]);
        }
        ResolveEvent ev[16];
        const unsigned ne = rte_ring_sc_dequeue_burst_elem(events_, ev, sizeof(ResolveEvent), 16, nullptr);
        for (unsigned i = 0; i < ne; ++i) resolution_->on_event(ev[i], now_ms());
        if (const uint64_t now = now_ms(); now >= next_tick) {
            resolution_->tick(now);
            next_tick = now + kResolveTickMs;
        }
        // A group's member: what this burst registered goes to an idle store writer, and the writes
        // that came back are answered (their writers rang the doorbell this loop sleeps on).
        resolution_->flush(now_ms());
        // Idle: sleep until the lcore hands something over or the next tick comes. A back-off on a
        // timer made every handshake message wait out a nap on each gateway it crossed.
        if (n + ne != 0) {
            empty_polls = 0;
        } else if (++empty_polls >= kPuntSpinPolls) {
            empty_polls = 0;
            wait_for_punts(next_tick);
        }
    }
}

void Gateway::wait_for_punts(uint64_t deadline_ms) {
    wake_.sleeping.store(true, std::memory_order_relaxed);
    // Pairs with the lcore's fence between its enqueue and its look at the flag (ControlWake): what
    // it enqueued before it could see the flag is in the rings now, so it is not slept through.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const bool reload = reload_requested_ != nullptr && reload_requested_->load(std::memory_order_relaxed);
    if (rte_ring_count(punt_) == 0 && rte_ring_count(events_) == 0 && !stop_control_.load() && !reload) {
        const uint64_t now = now_ms();
        pollfd p{wake_.fd, POLLIN, 0};
        if (::poll(&p, 1, deadline_ms > now ? static_cast<int>(deadline_ms - now) : 0) == 1) {
            uint64_t count;
            (void)!::read(wake_.fd, &count, sizeof count);  // resets it: the next sleep waits again
        }
    }
    // Down whether or not the lcore took it: a token the lcore writes after a timeout only makes the
    // next sleep return at once.
    wake_.sleeping.store(false, std::memory_order_relaxed);
}

void Gateway::send_udp(uint32_t dst, uint16_t dst_port, std::span<const uint8_t> d) {
    uint32_t nh = 0;
    const int out = Dataplane::route(dp_ports_, rte_cpu_to_be_32(dst), &nh);
    if (out < 0) return;
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) return;  // the stream retransmits; a lost reply makes the client retry
    const uint16_t ip_len = static_cast<uint16_t>(sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + d.size());
    // The mbuf's headroom takes the Ethernet header the lcore prepends.
    char* data = rte_pktmbuf_append(m, ip_len);
    if (data == nullptr) {
        rte_pktmbuf_free(m);
        return;
    }
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(data);
    std::memcpy(data + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr), d.data(), d.size());
    Dataplane::write_udp_ipv4(ip, dp_ports_[out].addr, rte_cpu_to_be_32(dst), rte_cpu_to_be_16(cfg_.resolve.port),
                              rte_cpu_to_be_16(dst_port), static_cast<uint16_t>(d.size()));
    if (rte_ring_mp_enqueue(inject_, m) != 0) return rte_pktmbuf_free(m);
    bells_[0].ring();
}

std::vector<const Dataplane*> Gateway::workers() const {
    std::vector<const Dataplane*> out;
    for (const auto& dp : dps_) out.push_back(dp.get());
    return out;
}

void Gateway::pick_lcores() {
    const unsigned want = cfg_.dataplane.workers;
    unsigned lcore;
    RTE_LCORE_FOREACH_WORKER(lcore) {
        if (dp_lcores_.size() < want) dp_lcores_.push_back(lcore);
    }
    if (dp_lcores_.empty() && want == 1) dp_lcores_.push_back(rte_get_main_lcore());  // shares the main lcore
    if (dp_lcores_.size() < want)
        throw std::runtime_error("[dataplane] workers = " + std::to_string(want) + " needs " + std::to_string(want) +
                                 " EAL worker lcores, eal.args give " + std::to_string(rte_lcore_count() - 1) +
                                 " (-l 0-" + std::to_string(want) + ", or --lcores to put several on one CPU, e.g. " +
                                 "--lcores 0@0,1@1,2@1)");
}

// Each worker checks peer messages with its own table.
void Gateway::set_worker_peers(const Config& c) {
    for (std::size_t w = 0; w < dps_.size(); ++w) {
        auto r = std::make_unique<DpRequest>();
        r->kind = DpRequest::Kind::set_peers;
        r->peers = make_peer_table(dp_peers(c), SeqClock::realtime_ns(), peer_verify_limit(c.resolve, dps_.size()));
        for (const PeerConfig& p : c.peers) r->peer_parties.push_back(p.party_id);
        ask_lcore(std::move(r), kRequestTimeout, w);  // comes back holding the old table, freed here
    }
}

void Gateway::dump_session_events(const std::function<bool(std::span<const SessionEvent>)>& page) {
    constexpr uint32_t kPage = 4096;  // what a worker copies per request: a short pause, 512 KB
    std::vector<SessionEvent> events;
    for (std::size_t w = 0; w < dps_.size(); ++w) {
        uint32_t from = 0;
        for (;;) {
            auto r = std::make_unique<DpRequest>();
            r->kind = DpRequest::Kind::session_dump;
            r->limit = kPage;
            r->from = from;
            r->sessions.reserve(kPage);
            r = ask_lcore(std::move(r), kRequestTimeout, w);
            events.clear();
            for (const SessionInfo& s : r->sessions) events.push_back(Nat::event_of(s, SessionEvent::opened));
            if (!events.empty() && !page(events)) return;
            if (r->sessions.size() < kPage || r->next <= from) break;  // the table is done
            from = r->next;
        }
    }
}

std::unique_ptr<DpRequest> Gateway::ask_lcore(std::unique_ptr<DpRequest> req, std::chrono::milliseconds timeout,
                                              std::size_t w) {
    DpRequest* r = req.get();
    if (rte_ring_mp_enqueue(requests_.at(w), r) != 0)
        throw MgmtError("the data plane's request ring is full; try again");
    req.release();  // the lcore has it now
    bells_[w].ring();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!r->done.load(std::memory_order_acquire)) {
        // The lcore may still answer later: the request is left to it (a bounded leak) rather
        // than freed under its feet.
        if (std::chrono::steady_clock::now() > deadline) throw MgmtError("the data plane did not answer in time");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::unique_ptr<DpRequest>(r);
}

}  // namespace fedgate
