// Packet capture on a running gateway: what a port receives and sends, written as pcapng (DPDK's
// rte_pcapng) that tcpdump, tshark and Wireshark read, each packet with its interface and direction.
// Works with --no-huge, where dpdk-pdump and dpdk-dumpcap cannot attach: the capture runs inside
// fedgated.
//
// The filter (libpcap syntax, as for tcpdump) is compiled by libpcap to classic BPF, converted by
// rte_bpf_convert to eBPF over the mbuf and loaded by rte_bpf, JIT-compiled where the machine has
// DPDK's JIT. The lcore side is an ethdev rx and tx callback on each of the port's queues: it runs
// the filter over the burst, copies each match with rte_pcapng_copy (first `snaplen` bytes, queue and
// direction) into the capture's own pool and puts it on a ring; a full ring or empty pool is a
// counted drop, never a stall. A writer thread drains the ring with rte_pcapng_write_packets into the
// file, or into the descriptor fedgatectl passed over the management socket (`-w -`). Stopping
// removes the callbacks, waits an RCU grace period so no lcore is still inside them, then drains and
// closes the output.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct rte_bpf;
struct rte_mbuf;
struct rte_rcu_qsbr;

namespace fedgate {

struct CapturePort {
    std::string name;
    uint16_t port_id = 0;
    uint16_t queues = 1;  // one per data-plane worker: the capture taps each
};

inline constexpr uint32_t kDefaultSnaplen = 2048;  // bytes of each frame kept (sizes the capture pool's mbufs)
inline constexpr std::size_t kMaxCaptures = 4;     // running at once

// A tcpdump filter expression as an rte_bpf program over an Ethernet frame in an mbuf. Needs the
// EAL (rte_bpf allocates from it). Runs on the lcore: no allocation, no lock.
class CaptureFilter {
public:
    // Throws MgmtError with libpcap's reason for a bad expression, or rte_bpf's for one it cannot
    // convert or load. `jit` false keeps the interpreter even where a JIT exists (tests).
    CaptureFilter(const std::string& expr, uint32_t snaplen, bool jit = true);
    ~CaptureFilter();
    CaptureFilter(const CaptureFilter&) = delete;
    CaptureFilter& operator=(const CaptureFilter&) = delete;

    bool jit() const { return jit_ != nullptr; }
    bool matches(rte_mbuf* m) const;
    // verdict[i] != 0: pkts[i] matches.
    void run(rte_mbuf* const* pkts, uint16_t n, uint64_t* verdict) const;

private:
    rte_bpf* bpf_ = nullptr;
    uint64_t (*jit_)(void*) = nullptr;
};

class CaptureService {
public:
    // `rcu` lets stop() wait until the lcore has left the callbacks (null: no lcore runs, tests).
    CaptureService(std::vector<CapturePort> ports, rte_rcu_qsbr* rcu);
    ~CaptureService();  // stops every capture, closing its output
    CaptureService(const CaptureService&) = delete;
    CaptureService& operator=(const CaptureService&) = delete;

    // The management requests capture_start {port, file, count?, filter?, snaplen?},
    // capture_status {id} and capture_stop {id}; errors as MgmtError naming the field. `file` is an
    // absolute path that must not exist yet, or "-": the descriptor the client passed with the
    // request (mgmt_take_passed_fd), which fedgatectl fills with its standard output.
    nlohmann::ordered_json handle(const nlohmann::ordered_json& request);

    struct Session;

private:
    nlohmann::ordered_json start(const nlohmann::ordered_json& request);
    Session& session(const nlohmann::ordered_json& request);  // under mu_
    void stop_session(Session& s);  // removes the callbacks, waits them out, drains, closes

    std::vector<CapturePort> ports_;
    rte_rcu_qsbr* rcu_;
    std::mutex mu_;
    uint32_t next_id_ = 1;
    std::map<uint32_t, std::unique_ptr<Session>> sessions_;
};

}  // namespace fedgate
