// Packet capture on a running gateway: what a port receives and sends, written to a pcap file that
// tcpdump, tshark and Wireshark read. Works with --no-huge, where dpdk-pdump and dpdk-dumpcap
// cannot attach: the capture runs inside fedgated.
//
// The lcore side is an ethdev rx and tx callback on the port's queue 0: it runs a compiled BPF
// filter (libpcap syntax, as for tcpdump) over each frame, copies the first `snaplen` bytes of a
// match with its TSC timestamp into an mbuf of the capture's own pool and puts it on a ring; a full
// ring or empty pool is a counted drop, never a stall. A writer thread drains the ring into the
// file. Stopping removes the callbacks, waits an RCU grace period so no lcore is still inside
// them, then drains and closes the file.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct rte_rcu_qsbr;

namespace fedgate {

struct CapturePort {
    std::string name;
    uint16_t port_id = 0;
    uint16_t queues = 1;  // one per data-plane worker: the capture taps each
};

inline constexpr uint32_t kDefaultSnaplen = 2048;  // bytes of each frame kept (the capture pool's mbuf size)
inline constexpr std::size_t kMaxCaptures = 4;     // running at once

class CaptureService {
public:
    // `rcu` lets stop() wait until the lcore has left the callbacks (null: no lcore runs, tests).
    CaptureService(std::vector<CapturePort> ports, rte_rcu_qsbr* rcu);
    ~CaptureService();  // stops every capture, closing its file
    CaptureService(const CaptureService&) = delete;
    CaptureService& operator=(const CaptureService&) = delete;

    // The management requests capture_start {port, file, count?, filter?, snaplen?},
    // capture_status {id} and capture_stop {id}; errors as MgmtError naming the field.
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
