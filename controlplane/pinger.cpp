// Pinger: echo requests injected into the data plane, replies matched by (identifier, sequence).
#include "controlplane/pinger.hpp"

#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <stdexcept>

#include "controlplane/config.hpp"

namespace fedgate {

Pinger::Pinger(rte_mempool* pool, rte_ring* inject, std::vector<DpPortConfig> ports, LcoreWake* bell)
    : pool_(pool), inject_(inject), ports_(std::move(ports)), bell_(bell) {}

PingResult Pinger::ping(uint32_t dst, uint32_t count, std::chrono::milliseconds timeout) {
    PingResult r;
    r.dst = dst;
    uint32_t nh = 0;
    r.port = Dataplane::route(ports_, dst, &nh);
    if (r.port < 0) throw std::runtime_error("no port reaches " + format_ipv4(rte_be_to_cpu_32(dst)));
    r.src = ports_[r.port].addr;

    uint16_t ident;
    {
        std::lock_guard lk(mu_);
        ident = static_cast<uint16_t>(0xf000 | (next_ident_++ & 0x0fff));
    }
    for (uint16_t seq = 1; seq <= count; ++seq) {
        rte_mbuf* m = rte_pktmbuf_alloc(pool_);
        if (m == nullptr) throw std::runtime_error("no mbufs left to build the echo request");
        constexpr uint16_t kLen = sizeof(rte_ipv4_hdr) + sizeof(rte_icmp_hdr) + kPayloadBytes;
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(rte_pktmbuf_append(m, kLen));
        *ip = rte_ipv4_hdr{};
        ip->version_ihl = RTE_IPV4_VHL_DEF;
        ip->total_length = rte_cpu_to_be_16(kLen);
        ip->packet_id = rte_cpu_to_be_16(seq);
        ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
        ip->time_to_live = 64;
        ip->next_proto_id = IPPROTO_ICMP;
        ip->src_addr = r.src;
        ip->dst_addr = dst;
        ip->hdr_checksum = rte_ipv4_cksum(ip);
        auto* icmp = reinterpret_cast<rte_icmp_hdr*>(ip + 1);
        icmp->icmp_type = RTE_IP_ICMP_ECHO_REQUEST;
        icmp->icmp_code = 0;
        icmp->icmp_ident = rte_cpu_to_be_16(ident);
        icmp->icmp_seq_nb = rte_cpu_to_be_16(seq);
        auto* payload = reinterpret_cast<uint8_t*>(icmp + 1);
        for (uint16_t i = 0; i < kPayloadBytes; ++i) payload[i] = static_cast<uint8_t>(i);
        icmp->icmp_cksum = 0;
        icmp->icmp_cksum = static_cast<uint16_t>(~rte_raw_cksum(icmp, sizeof(rte_icmp_hdr) + kPayloadBytes));

        const Key key{rte_cpu_to_be_16(ident), rte_cpu_to_be_16(seq)};
        std::unique_lock lk(mu_);
        waiting_[key] = Waiter{dst, Clock::now(), std::nullopt};
        if (rte_ring_mp_enqueue(inject_, m) != 0) {
            waiting_.erase(key);
            lk.unlock();
            rte_pktmbuf_free(m);
            throw std::runtime_error("the data plane's inject ring is full");
        }
        if (bell_ != nullptr) bell_->ring();
        ++r.sent;
        cv_.wait_for(lk, timeout, [&] { return cancelled_ || waiting_[key].answered.has_value(); });
        const Waiter w = waiting_[key];
        waiting_.erase(key);
        if (w.answered) {
            ++r.received;
            r.rtt_ms.push_back(std::chrono::duration<double, std::milli>(*w.answered - w.sent).count());
        } else {
            r.rtt_ms.push_back(std::nullopt);
        }
        if (cancelled_) break;
    }
    return r;
}

void Pinger::on_echo_reply(uint32_t src, uint16_t ident, uint16_t seq) {
    const auto now = Clock::now();
    std::lock_guard lk(mu_);
    auto it = waiting_.find(Key{ident, seq});
    if (it == waiting_.end() || it->second.dst != src || it->second.answered) {
        ++unmatched_;
        return;
    }
    it->second.answered = now;
    cv_.notify_all();
}

void Pinger::cancel() {
    std::lock_guard lk(mu_);
    cancelled_ = true;
    cv_.notify_all();
}

uint64_t Pinger::unmatched_replies() const {
    std::lock_guard lk(mu_);
    return unmatched_;
}

}  // namespace fedgate
