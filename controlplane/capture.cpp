// Packet capture: ethdev callbacks on the lcore, a ring, and a writer thread per capture.
#include "controlplane/capture.hpp"

#include <pcap/pcap.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "controlplane/mgmt_server.hpp"

namespace fedgate {
namespace {

constexpr unsigned kPoolSize = 2047;  // frames in flight between the lcore and the writer
constexpr unsigned kRingSize = 2048;
constexpr unsigned kWriterBurst = 32;
constexpr auto kWriterIdleMax = std::chrono::milliseconds(5);

// What the lcore stores in front of each copied frame.
struct Record {
    uint64_t tsc;
    uint32_t wire_len;
    uint32_t cap_len;
    uint8_t direction;  // 0 rx, 1 tx
};

// Classic pcap (microsecond timestamps, Ethernet link type), in host byte order as libpcap writes it.
struct PcapFileHeader {
    uint32_t magic = 0xa1b2c3d4;
    uint16_t major = 2, minor = 4;
    int32_t thiszone = 0;
    uint32_t sigfigs = 0;
    uint32_t snaplen = 0;
    uint32_t linktype = 1;
};
struct PcapRecordHeader {
    uint32_t ts_sec, ts_usec, incl_len, orig_len;
};

}  // namespace

struct CaptureService::Session {
    uint32_t id = 0;
    std::string port_name, file, filter;
    uint16_t port_id = 0;
    uint16_t queues = 1;
    uint64_t count = 0;  // 0: until stopped
    uint32_t snaplen = kDefaultSnaplen;
    bpf_program prog{};
    bool has_filter = false;
    rte_mempool* pool = nullptr;
    rte_ring* ring = nullptr;
    std::vector<const rte_eth_rxtx_callback*> rx_cb, tx_cb;  // per queue
    std::FILE* out = nullptr;
    std::thread writer;
    uint64_t tsc0 = 0, hz = 1;
    timespec wall0{};
    std::atomic<uint64_t> seen{0}, matched{0}, dropped{0}, written{0};
    std::atomic<bool> detached{false};  // no lcore can enqueue any more: the writer drains and ends
    std::atomic<bool> write_failed{false};
    std::string write_error;  // set by the writer before write_failed

    ~Session() {
        if (has_filter) pcap_freecode(&prog);
        if (out != nullptr) std::fclose(out);
        rte_ring_free(ring);
        rte_mempool_free(pool);
    }

    // On the lcore, inside rte_eth_rx_burst / rte_eth_tx_burst.
    void tap(rte_mbuf* const* pkts, uint16_t n, uint8_t direction) {
        for (uint16_t i = 0; i < n; ++i) {
            seen.fetch_add(1, std::memory_order_relaxed);
            if (count != 0 && matched.load(std::memory_order_relaxed) >= count) return;
            const rte_mbuf* m = pkts[i];
            const auto* data = rte_pktmbuf_mtod(m, const u_char*);
            if (has_filter && bpf_filter(prog.bf_insns, data, m->pkt_len, m->data_len) == 0) continue;
            matched.fetch_add(1, std::memory_order_relaxed);
            copy(m, direction);
        }
    }

    void copy(const rte_mbuf* m, uint8_t direction) {
        rte_mbuf* c = rte_pktmbuf_alloc(pool);
        const uint32_t cap = std::min<uint32_t>(m->pkt_len, snaplen);
        char* dst = c == nullptr ? nullptr : rte_pktmbuf_append(c, static_cast<uint16_t>(sizeof(Record) + cap));
        if (dst == nullptr) {
            rte_pktmbuf_free(c);
            dropped.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        const Record r{rte_rdtsc(), m->pkt_len, cap, direction};
        std::memcpy(dst, &r, sizeof r);
        const void* src = rte_pktmbuf_read(m, 0, cap, dst + sizeof r);
        if (src != dst + sizeof r) std::memcpy(dst + sizeof r, src, cap);
        if (rte_ring_enqueue(ring, c) != 0) {  // every worker's queue taps into it
            rte_pktmbuf_free(c);
            dropped.fetch_add(1, std::memory_order_relaxed);
        }
    }

    static uint16_t on_rx(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, uint16_t, void* self) {
        static_cast<Session*>(self)->tap(pkts, n, 0);
        return n;
    }
    static uint16_t on_tx(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, void* self) {
        static_cast<Session*>(self)->tap(pkts, n, 1);
        return n;
    }

    // The writer thread.
    void write_loop() {
        auto idle = std::chrono::microseconds(50);
        void* objs[kWriterBurst];
        for (;;) {
            const bool last = detached.load(std::memory_order_acquire);  // read before draining
            const unsigned n = rte_ring_sc_dequeue_burst(ring, objs, kWriterBurst, nullptr);
            for (unsigned i = 0; i < n; ++i) write_one(static_cast<rte_mbuf*>(objs[i]));
            if (n != 0) {
                if (std::fflush(out) != 0) fail_write();
                idle = std::chrono::microseconds(50);
                continue;
            }
            if (last) return;
            std::this_thread::sleep_for(idle);
            idle = std::min<std::chrono::microseconds>(idle * 2, kWriterIdleMax);
        }
    }

    void write_one(rte_mbuf* c) {
        Record r;
        const auto* p = rte_pktmbuf_mtod(c, const uint8_t*);
        std::memcpy(&r, p, sizeof r);
        const uint64_t d = r.tsc - tsc0;
        const uint64_t ns_since = d / hz * 1'000'000'000ULL + d % hz * 1'000'000'000ULL / hz;
        const uint64_t ns = static_cast<uint64_t>(wall0.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(wall0.tv_nsec) + ns_since;
        const PcapRecordHeader h{static_cast<uint32_t>(ns / 1'000'000'000ULL), static_cast<uint32_t>(ns % 1'000'000'000ULL / 1000),
                                 r.cap_len, r.wire_len};
        if (!write_failed.load(std::memory_order_relaxed)) {
            if (std::fwrite(&h, sizeof h, 1, out) != 1 || std::fwrite(p + sizeof r, r.cap_len, 1, out) != 1)
                fail_write();
            else
                written.fetch_add(1, std::memory_order_relaxed);
        }
        rte_pktmbuf_free(c);
    }

    void fail_write() {
        if (write_failed.load()) return;
        write_error = "cannot write " + file + ": " + std::strerror(errno);
        write_failed.store(true, std::memory_order_release);
    }

    bool done() const { return count != 0 && written.load() + dropped.load() >= count; }

    nlohmann::ordered_json status() const {
        nlohmann::ordered_json j = {{"id", id},
                                    {"port", port_name},
                                    {"file", file},
                                    {"filter", filter},
                                    {"count", count},
                                    {"snaplen", snaplen},
                                    {"state", write_failed.load() ? "failed" : done() ? "done" : "running"},
                                    {"seen", seen.load()},
                                    {"matched", matched.load()},
                                    {"written", written.load()},
                                    {"dropped", dropped.load()}};
        if (write_failed.load(std::memory_order_acquire)) j["error"] = write_error;
        return j;
    }
};

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
    if (s->file.empty() || s->file[0] != '/') throw MgmtError("capture: \"file\" must be an absolute path, got '" + s->file + "'");
    s->filter = string_field(req, "filter", false);
    s->count = unsigned_field(req, "count", 0, 0, UINT32_MAX);
    s->snaplen = static_cast<uint32_t>(unsigned_field(req, "snaplen", kDefaultSnaplen, 64, kDefaultSnaplen));

    if (!s->filter.empty()) {
        pcap_t* dead = pcap_open_dead(DLT_EN10MB, static_cast<int>(s->snaplen));
        if (dead == nullptr) throw MgmtError("capture: libpcap could not set up a filter");
        const int rc = pcap_compile(dead, &s->prog, s->filter.c_str(), 1, PCAP_NETMASK_UNKNOWN);
        const std::string why = rc != 0 ? pcap_geterr(dead) : "";
        pcap_close(dead);
        if (rc != 0) throw MgmtError("capture: filter '" + s->filter + "': " + why);
        s->has_filter = true;
    }

    std::lock_guard lock(mu_);
    std::size_t running = 0;
    for (const auto& [id, o] : sessions_) running += !o->detached.load();
    if (running >= kMaxCaptures)
        throw MgmtError("capture: " + std::to_string(kMaxCaptures) + " captures are running; stop one first");
    s->id = next_id_++;
    const std::string tag = "fgcap" + std::to_string(s->id);
    s->pool = rte_pktmbuf_pool_create((tag + "p").c_str(), kPoolSize, 0, 0,
                                      static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + sizeof(Record) + s->snaplen), SOCKET_ID_ANY);
    s->ring = rte_ring_create((tag + "r").c_str(), kRingSize, SOCKET_ID_ANY, RING_F_SC_DEQ);
    if (s->pool == nullptr || s->ring == nullptr)
        throw MgmtError("capture: cannot allocate its buffers: " + std::string(rte_strerror(rte_errno)));
    s->out = std::fopen(s->file.c_str(), "wbx");  // never overwrite: the CLI removes an old file it was told to replace
    if (s->out == nullptr) throw MgmtError("capture: cannot create " + s->file + ": " + std::strerror(errno));
    PcapFileHeader fh;
    fh.snaplen = s->snaplen;
    if (std::fwrite(&fh, sizeof fh, 1, s->out) != 1 || std::fflush(s->out) != 0)
        throw MgmtError("capture: cannot write " + s->file + ": " + std::strerror(errno));
    s->hz = rte_get_tsc_hz();
    clock_gettime(CLOCK_REALTIME, &s->wall0);
    s->tsc0 = rte_rdtsc();
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
