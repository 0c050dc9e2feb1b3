// Packet capture: an rte_bpf filter and ethdev callbacks on the lcore, a ring, and a writer thread
// per capture writing pcapng through rte_pcapng.
#define ALLOW_EXPERIMENTAL_API  // rte_pcapng and rte_bpf_convert are experimental in DPDK 22.11
#include "controlplane/capture.hpp"

#include <fcntl.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <pthread.h>
#include <rte_bpf.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_pcapng.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "controlplane/mgmt_server.hpp"

namespace fedgate {
namespace {

constexpr unsigned kPoolSize = 2047;  // frames in flight between the lcore and the writer
constexpr unsigned kRingSize = 2048;
constexpr unsigned kWriterBurst = 32;  // one writev per batch: far below IOV_MAX
constexpr uint16_t kTapChunk = 64;     // packets filtered at once on the lcore (stack arrays)
constexpr auto kWriterIdleMax = std::chrono::milliseconds(5);
constexpr uint64_t kNsPerSec = 1'000'000'000ULL;

// The head of a pcapng Enhanced Packet Block as rte_pcapng_copy lays it out at the start of its copy
// (DPDK's pcapng_proto.h, which is not installed).
struct EpbHead {
    uint32_t block_type, block_length, interface_id, timestamp_hi, timestamp_lo, capture_length, original_length;
};
static_assert(sizeof(EpbHead) == 28);

// rte_bpf_convert (DPDK 22.11, and upstream as of 2025) turns classic `ld [x + k]` into an eBPF
// indirect load based on A (r0) instead of X (r7): every filter that reads past a variable-length
// header (`icmp[icmptype]`, `tcp[tcpflags]`, `tcp dst port 80` does not, `icmp[0] == 0` does)
// would read the wrong bytes. The converter emits indirect loads only for classic ones, whose index
// is always X, so they are pointed at X here. tests/eal/test_capture_eal.cpp checks every filter
// against libpcap's own interpreter.
constexpr uint8_t kRegA = 0, kRegX = 7;  // the converter's registers for A and X

void fix_indirect_loads(rte_bpf_prm* prm) {
    auto* ins = const_cast<ebpf_insn*>(prm->ins);  // the converter's own allocation, right after prm
    for (uint32_t i = 0; i < prm->nb_ins; ++i)
        if (BPF_CLASS(ins[i].code) == BPF_LD && BPF_MODE(ins[i].code) == BPF_IND && ins[i].src_reg == kRegA)
            ins[i].src_reg = kRegX;
}

// DPDK's x86-64 JIT (22.11, and upstream as of 2025) encodes `jset reg, #imm` with an immediate
// in -128..127 as `test reg, imm8`, which x86 does not have (F7 /0 takes imm32): the following
// instructions decode as garbage and the program crashes. tcpdump filters use such tests for flags
// (`tcp[tcpflags] & tcp-syn != 0`, `ip[6] & 0x20 != 0`). Those programs run in the interpreter.
bool jit_would_miscompile(const rte_bpf_prm* prm) {
    for (uint32_t i = 0; i < prm->nb_ins; ++i) {
        const ebpf_insn& in = prm->ins[i];
        if (in.code == (BPF_JMP | BPF_JSET | BPF_K) && in.imm >= INT8_MIN && in.imm <= INT8_MAX) return true;
    }
    return false;
}

}  // namespace

// ---- the filter ---------------------------------------------------------------------------------

CaptureFilter::CaptureFilter(const std::string& expr, uint32_t snaplen, bool jit) {
    pcap_t* dead = pcap_open_dead(DLT_EN10MB, static_cast<int>(snaplen));
    if (dead == nullptr) throw MgmtError("capture: libpcap could not set up a filter");
    bpf_program classic{};
    const int rc = pcap_compile(dead, &classic, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN);
    const std::string why = rc != 0 ? pcap_geterr(dead) : "";
    pcap_close(dead);
    if (rc != 0) throw MgmtError("capture: filter '" + expr + "': " + why);
    rte_bpf_prm* prm = rte_bpf_convert(&classic);  // an eBPF program whose argument is the mbuf
    pcap_freecode(&classic);
    if (prm == nullptr)
        throw MgmtError("capture: filter '" + expr + "': rte_bpf cannot convert it: " + rte_strerror(rte_errno));
    fix_indirect_loads(prm);
    const bool jit_ok = jit && !jit_would_miscompile(prm);
    bpf_ = rte_bpf_load(prm);  // verifies, copies the program, and JIT-compiles it where DPDK can
    const int load_err = rte_errno;
    rte_free(prm);
    if (bpf_ == nullptr)
        throw MgmtError("capture: filter '" + expr + "': rte_bpf cannot load it: " + rte_strerror(load_err));
    rte_bpf_jit j{};
    if (jit_ok && rte_bpf_get_jit(bpf_, &j) == 0) jit_ = j.func;
}

CaptureFilter::~CaptureFilter() { rte_bpf_destroy(bpf_); }

bool CaptureFilter::matches(rte_mbuf* m) const { return (jit_ != nullptr ? jit_(m) : rte_bpf_exec(bpf_, m)) != 0; }

void CaptureFilter::run(rte_mbuf* const* pkts, uint16_t n, uint64_t* verdict) const {
    if (jit_ != nullptr) {
        for (uint16_t i = 0; i < n; ++i) verdict[i] = jit_(pkts[i]);
        return;
    }
    rte_bpf_exec_burst(bpf_, reinterpret_cast<void**>(const_cast<rte_mbuf**>(pkts)), verdict, n);
}

// ---- one capture --------------------------------------------------------------------------------

struct CaptureService::Session {
    uint32_t id = 0;
    std::string port_name, file, filter_text;
    uint16_t port_id = 0;
    uint16_t queues = 1;
    uint64_t count = 0;  // 0: until stopped
    uint32_t snaplen = kDefaultSnaplen;
    std::unique_ptr<CaptureFilter> filter;
    rte_mempool* pool = nullptr;
    rte_ring* ring = nullptr;
    std::vector<const rte_eth_rxtx_callback*> rx_cb, tx_cb;  // per queue
    int fd = -1;                    // the output; rte_pcapng_close closes it once `out` exists
    rte_pcapng_t* out = nullptr;
    std::thread writer;
    uint64_t tsc0 = 0, hz = 1, wall0_ns = 0;  // this capture's clock: TSC cycles to wall-clock ns
    std::atomic<uint64_t> seen{0}, matched{0}, written{0}, ring_full{0}, no_mbuf{0};
    std::atomic<bool> detached{false};  // no lcore can enqueue any more: the writer drains and ends
    std::atomic<bool> write_failed{false};
    std::string write_error;  // set by the writer before write_failed

    ~Session() {
        if (out != nullptr)
            rte_pcapng_close(out);
        else if (fd >= 0)
            ::close(fd);
        rte_ring_free(ring);
        rte_mempool_free(pool);
    }

    std::string where() const { return file == "-" ? "fedgatectl's standard output" : file; }

    // DPDK 22.11's rte_pcapng_copy turns cycles into ns through one process-wide time base that it
    // moves forward without synchronisation, so two workers copying at once can corrupt it. Each
    // capture keeps its own base, read-only once started, and stamps the copies itself.
    uint64_t wall_ns(uint64_t tsc) const {
        const uint64_t d = tsc - tsc0;
        return wall0_ns + d / hz * kNsPerSec + d % hz * kNsPerSec / hz;
    }

    // Takes one more packet toward `count`; false once the capture has all it wants.
    bool claim() {
        if (count == 0) {
            matched.fetch_add(1, std::memory_order_relaxed);
            return true;
        }
        uint64_t m = matched.load(std::memory_order_relaxed);
        do
            if (m >= count) return false;
        while (!matched.compare_exchange_weak(m, m + 1, std::memory_order_relaxed));
        return true;
    }

    // On the lcore, inside rte_eth_rx_burst / rte_eth_tx_burst.
    void tap(uint16_t queue, rte_mbuf* const* pkts, uint16_t n, rte_pcapng_direction dir) {
        seen.fetch_add(n, std::memory_order_relaxed);
        const uint64_t now = rte_rdtsc();
        const uint64_t ns = wall_ns(now);
        for (uint16_t at = 0; at < n; at += kTapChunk) {
            const uint16_t k = std::min<uint16_t>(kTapChunk, static_cast<uint16_t>(n - at));
            uint64_t verdict[kTapChunk];
            if (filter != nullptr) filter->run(pkts + at, k, verdict);
            rte_mbuf* copies[kTapChunk];
            unsigned c = 0;
            bool full = false;
            for (uint16_t i = 0; i < k && !full; ++i) {
                if (filter != nullptr && verdict[i] == 0) continue;
                if (!claim()) {
                    full = true;
                    break;
                }
                rte_mbuf* m = rte_pcapng_copy(port_id, queue, pkts[at + i], pool, snaplen, now, dir);
                if (m == nullptr) {  // the pool is empty (or a VLAN tag could not be put back)
                    no_mbuf.fetch_add(1, std::memory_order_relaxed);
                    continue;
                }
                auto* epb = rte_pktmbuf_mtod(m, EpbHead*);
                epb->timestamp_hi = static_cast<uint32_t>(ns >> 32);
                epb->timestamp_lo = static_cast<uint32_t>(ns);
                copies[c++] = m;
            }
            // Every worker's queue taps into the one ring.
            const unsigned put = rte_ring_enqueue_burst(ring, reinterpret_cast<void**>(copies), c, nullptr);
            if (put < c) {
                rte_pktmbuf_free_bulk(copies + put, c - put);
                ring_full.fetch_add(c - put, std::memory_order_relaxed);
            }
            if (full) return;
        }
    }

    static uint16_t on_rx(uint16_t, uint16_t queue, rte_mbuf** pkts, uint16_t n, uint16_t, void* self) {
        static_cast<Session*>(self)->tap(queue, pkts, n, RTE_PCAPNG_DIRECTION_IN);
        return n;
    }
    static uint16_t on_tx(uint16_t, uint16_t queue, rte_mbuf** pkts, uint16_t n, void* self) {
        static_cast<Session*>(self)->tap(queue, pkts, n, RTE_PCAPNG_DIRECTION_OUT);
        return n;
    }

    // The writer thread.
    void write_loop() {
        // No signal handler runs here, so a write is never cut short by one, and a reader of
        // fedgatectl's output that went away is EPIPE for this capture, not SIGPIPE for fedgated.
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);
        auto idle = std::chrono::microseconds(50);
        rte_mbuf* batch[kWriterBurst];
        for (;;) {
            const bool last = detached.load(std::memory_order_acquire);  // read before draining
            const unsigned n = rte_ring_sc_dequeue_burst(ring, reinterpret_cast<void**>(batch), kWriterBurst, nullptr);
            if (n != 0) {
                write_batch(batch, n);
                idle = std::chrono::microseconds(50);
                continue;
            }
            if (last) return;
            std::this_thread::sleep_for(idle);
            idle = std::min<std::chrono::microseconds>(idle * 2, kWriterIdleMax);
        }
    }

    void write_batch(rte_mbuf** batch, unsigned n) {
        if (!write_failed.load(std::memory_order_relaxed)) {
            std::size_t want = 0;
            for (unsigned i = 0; i < n; ++i) want += rte_pktmbuf_pkt_len(batch[i]);
            ssize_t done = rte_pcapng_write_packets(out, batch, static_cast<uint16_t>(n));
            if (done < 0 && rte_errno == EAGAIN) done = 0;  // an O_NONBLOCK pipe: finish below
            if (done < 0)
                fail_write(rte_errno);
            else if (static_cast<std::size_t>(done) < want && !write_rest(batch, n, static_cast<std::size_t>(done)))
                fail_write(errno);
            else
                written.fetch_add(n, std::memory_order_relaxed);
        }
        rte_pktmbuf_free_bulk(batch, n);  // rte_pcapng_write_packets (22.11) leaves them to us
    }

    // rte_pcapng_write_packets makes one writev, which a pipe in non-blocking mode or a nearly full
    // disk may take only part of: write the rest, else the file is torn mid-block.
    bool write_rest(rte_mbuf* const* batch, unsigned n, std::size_t skip) const {
        for (unsigned i = 0; i < n; ++i)
            for (const rte_mbuf* s = batch[i]; s != nullptr; s = s->next) {
                const char* p = rte_pktmbuf_mtod(s, const char*);
                std::size_t len = rte_pktmbuf_data_len(s);
                if (skip >= len) {
                    skip -= len;
                    continue;
                }
                p += skip;
                len -= skip;
                skip = 0;
                while (len > 0) {
                    const ssize_t w = ::write(fd, p, len);
                    if (w > 0) {
                        p += w;
                        len -= static_cast<std::size_t>(w);
                    } else if (w < 0 && errno == EAGAIN) {
                        pollfd pf{fd, POLLOUT, 0};
                        ::poll(&pf, 1, 100);
                    } else if (w == 0 || errno != EINTR) {
                        if (w == 0) errno = EIO;
                        return false;
                    }
                }
            }
        return true;
    }

    void fail_write(int err) {
        if (write_failed.load()) return;
        write_error = "cannot write " + where() + ": " + std::strerror(err);
        write_failed.store(true, std::memory_order_release);
    }

    uint64_t dropped() const { return ring_full.load() + no_mbuf.load(); }
    bool done() const { return count != 0 && written.load() + dropped() >= count; }

    nlohmann::ordered_json status() const {
        nlohmann::ordered_json j = {{"id", id},
                                    {"port", port_name},
                                    {"file", file},
                                    {"format", "pcapng"},
                                    {"filter", filter_text},
                                    {"filter_jit", filter != nullptr && filter->jit()},
                                    {"count", count},
                                    {"snaplen", snaplen},
                                    {"state", write_failed.load() ? "failed" : done() ? "done" : "running"},
                                    {"seen", seen.load()},
                                    {"matched", matched.load()},
                                    {"written", written.load()},
                                    {"dropped", dropped()},
                                    {"dropped_ring_full", ring_full.load()},
                                    {"dropped_no_mbuf", no_mbuf.load()}};
        if (write_failed.load(std::memory_order_acquire)) j["error"] = write_error;
        return j;
    }
};

// ---- the service --------------------------------------------------------------------------------

CaptureService::CaptureService(std::vector<CapturePort> ports, rte_rcu_qsbr* rcu) : ports_(std::move(ports)), rcu_(rcu) {}

CaptureService::~CaptureService() {
    std::lock_guard lock(mu_);
    for (auto& [id, s] : sessions_) stop_session(*s);
}

namespace {

uint64_t unsigned_field(const nlohmann::ordered_json& req, const char* name, uint64_t fallback, uint64_t lo, uint64_t hi) {
    if (!req.contains(name)) return fallback;
    const auto& v = req[name];
    if (!v.is_number_unsigned() || v.get<uint64_t>() < lo || v.get<uint64_t>() > hi)
        throw MgmtError(std::string("capture: \"") + name + "\" must be an integer " + std::to_string(lo) + ".." +
                        std::to_string(hi));
    return v.get<uint64_t>();
}

std::string string_field(const nlohmann::ordered_json& req, const char* name, bool required) {
    if (!req.contains(name)) {
        if (required) throw MgmtError(std::string("capture: \"") + name + "\" is missing");
        return {};
    }
    if (!req[name].is_string()) throw MgmtError(std::string("capture: \"") + name + "\" must be a string");
    return req[name].get<std::string>();
}

// The descriptor a client passed for "file": "-": something to stream pcapng into.
void check_passed_output(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw MgmtError(std::string("capture: the passed descriptor: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) throw MgmtError("capture: the passed descriptor is a directory");
    if (::isatty(fd)) throw MgmtError("capture: the passed descriptor is a terminal: pcapng is binary, pipe it (| tshark -r -)");
    const int mode = ::fcntl(fd, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) == O_RDONLY) throw MgmtError("capture: the passed descriptor is not open for writing");
}

std::string os_name() {
    utsname u{};
    return ::uname(&u) == 0 ? std::string(u.sysname) + " " + u.release : std::string("Linux");
}

}  // namespace

void CaptureService::stop_session(Session& s) {
    for (uint16_t q = 0; q < s.rx_cb.size(); ++q)
        if (s.rx_cb[q] != nullptr) rte_eth_remove_rx_callback(s.port_id, q, s.rx_cb[q]);
    for (uint16_t q = 0; q < s.tx_cb.size(); ++q)
        if (s.tx_cb[q] != nullptr) rte_eth_remove_tx_callback(s.port_id, q, s.tx_cb[q]);
    // No lcore may still be inside a callback when its memory goes.
    if (rcu_ != nullptr) rte_rcu_qsbr_synchronize(rcu_, RTE_QSBR_THRID_INVALID);
    for (const auto* cb : s.rx_cb) rte_free(const_cast<rte_eth_rxtx_callback*>(cb));
    for (const auto* cb : s.tx_cb) rte_free(const_cast<rte_eth_rxtx_callback*>(cb));
    s.rx_cb.clear();
    s.tx_cb.clear();
    s.detached.store(true, std::memory_order_release);
    if (s.writer.joinable()) s.writer.join();
}

nlohmann::ordered_json CaptureService::start(const nlohmann::ordered_json& req) {
    const std::string port = string_field(req, "port", true);
    const CapturePort* p = nullptr;
    std::string names;
    for (const CapturePort& c : ports_) {
        if (c.name == port) p = &c;
        names += (names.empty() ? "" : ", ") + c.name;
    }
    if (p == nullptr) throw MgmtError("capture: port '" + port + "' is not one of this gateway's ports (" + names + ")");
    auto s = std::make_unique<Session>();
    s->port_name = port;
    s->port_id = p->port_id;
    s->queues = p->queues;
    s->file = string_field(req, "file", true);
    if (s->file == "-") {
        s->fd = mgmt_take_passed_fd();
        if (s->fd < 0)
            throw MgmtError("capture: \"file\" is \"-\" but no descriptor came with the request "
                            "(fedgatectl capture -w - passes its standard output)");
        check_passed_output(s->fd);
    } else if (s->file.empty() || s->file[0] != '/') {
        throw MgmtError("capture: \"file\" must be an absolute path or \"-\", got '" + s->file + "'");
    }
    s->filter_text = string_field(req, "filter", false);
    s->count = unsigned_field(req, "count", 0, 0, UINT32_MAX);
    s->snaplen = static_cast<uint32_t>(unsigned_field(req, "snaplen", kDefaultSnaplen, 64, kDefaultSnaplen));
    if (!s->filter_text.empty()) s->filter = std::make_unique<CaptureFilter>(s->filter_text, s->snaplen);

    std::lock_guard lock(mu_);
    std::size_t running = 0;
    for (const auto& [id, o] : sessions_) running += !o->detached.load();
    if (running >= kMaxCaptures)
        throw MgmtError("capture: " + std::to_string(kMaxCaptures) + " captures are running; stop one first");
    s->id = next_id_++;
    const std::string tag = "fgcap" + std::to_string(s->id);
    // One segment holds a whole copy: the EPB header goes in the headroom, its options at the end.
    s->pool = rte_pktmbuf_pool_create((tag + "p").c_str(), kPoolSize, 0, 0,
                                      static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + rte_pcapng_mbuf_size(s->snaplen)),
                                      SOCKET_ID_ANY);
    s->ring = rte_ring_create((tag + "r").c_str(), kRingSize, SOCKET_ID_ANY, RING_F_SC_DEQ);
    if (s->pool == nullptr || s->ring == nullptr)
        throw MgmtError("capture: cannot allocate its buffers: " + std::string(rte_strerror(rte_errno)));
    if (s->fd < 0) {
        // Never overwrite: the CLI removes an old file it was told to replace.
        s->fd = ::open(s->file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (s->fd < 0) throw MgmtError("capture: cannot create " + s->file + ": " + std::strerror(errno));
    }
    // The section header and one interface block per DPDK port, named after its kernel interface
    // where it has one (af_packet, tap), else dpdk:N; each packet names its port's block.
    const std::string comment = "fedgate port " + port + " (DPDK port " + std::to_string(s->port_id) + ")" +
                                (s->filter_text.empty() ? "" : ", filter '" + s->filter_text + "'");
    errno = 0;
    s->out = rte_pcapng_fdopen(s->fd, os_name().c_str(), nullptr, "fedgated " FEDGATE_VERSION, comment.c_str());
    if (s->out == nullptr)
        throw MgmtError("capture: cannot write " + s->where() + ": " + std::strerror(errno != 0 ? errno : rte_errno));
    s->hz = rte_get_tsc_hz();
    timespec wall{};
    clock_gettime(CLOCK_REALTIME, &wall);
    s->tsc0 = rte_rdtsc();
    s->wall0_ns = static_cast<uint64_t>(wall.tv_sec) * kNsPerSec + static_cast<uint64_t>(wall.tv_nsec);
    s->writer = std::thread([ss = s.get()] { ss->write_loop(); });
    bool added = true;
    for (uint16_t q = 0; q < s->queues && added; ++q) {
        s->rx_cb.push_back(rte_eth_add_rx_callback(s->port_id, q, &Session::on_rx, s.get()));
        s->tx_cb.push_back(rte_eth_add_tx_callback(s->port_id, q, &Session::on_tx, s.get()));
        added = s->rx_cb.back() != nullptr && s->tx_cb.back() != nullptr;
    }
    if (!added) {
        stop_session(*s);
        throw MgmtError("capture: the port does not take rx/tx callbacks: " + std::string(rte_strerror(rte_errno)));
    }
    Session& ref = *s;
    sessions_[ref.id] = std::move(s);
    return ref.status();
}

CaptureService::Session& CaptureService::session(const nlohmann::ordered_json& req) {
    const auto id = static_cast<uint32_t>(unsigned_field(req, "id", 0, 1, UINT32_MAX));
    const auto it = sessions_.find(id);
    if (it == sessions_.end()) throw MgmtError("capture: no capture with id " + std::to_string(id));
    return *it->second;
}

nlohmann::ordered_json CaptureService::handle(const nlohmann::ordered_json& req) {
    const std::string cmd = req.at("cmd").get<std::string>();
    if (cmd == "capture_start") return start(req);
    std::lock_guard lock(mu_);
    if (cmd == "capture_status") return session(req).status();
    if (cmd == "capture_stop") {
        Session& s = session(req);
        stop_session(s);
        nlohmann::ordered_json j = s.status();
        j["state"] = s.write_failed.load() ? "failed" : "stopped";
        sessions_.erase(s.id);
        return j;
    }
    throw MgmtError("capture: unknown request '" + cmd + "'");
}

}  // namespace fedgate
