// Wire format of the connection handshake (REQ / REP / RTU) that sets up a connection between two
// compute processes, relayed by both parties' gateways. DPDK-free, like resolve_wire.hpp, whose
// header, message types and big-endian helpers it uses.
//
//   initiator --conn_req--> gateway A --hs_req--> gateway B --conn_req--> target
//   initiator <--conn_rep-- gateway A <--hs_rep-- gateway B <--conn_rep-- target
//   initiator --conn_rtu--> gateway A --hs_rtu--> gateway B --conn_rtu--> target
//
// Every message carries the whole ConnBody. A message is idempotent by (initiator, conn_id): the
// initiator retries REQ until a REP arrives; the target answers a repeated REQ with the same REP.
// A gateway that refuses a handshake answers the initiator's side with a REP whose status says why.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "resolve_wire.hpp"

namespace fedgate {

enum class ConnStatus : uint8_t {
    ok = 0,
    unknown_initiator = 1,   // the initiator is not a registered process of its gateway's party (or not at its address)
    unknown_target = 2,      // the target is not registered with its party's gateway
    not_listening = 3,       // the target process accepts no connections
    transport_mismatch = 4,  // no transport both sides support
    no_peer = 5,             // no peer gateway for the target's party
    busy = 6,                // a handshake table or the target's accept queue is full
    no_mapping = 7,          // a gateway could not set up the port mapping the tcp transport needs
    bad_request = 8,         // malformed: zero IDs, target party 0, fields out of range
    wrong_party = 9,         // a peer relayed a handshake for processes that are not its own
};
const char* conn_status_name(ConnStatus s);

// Transport capabilities. In REQ: what the initiator supports. In an ok REP: the one chosen.
inline constexpr uint8_t kCapRdma = 0x01;
inline constexpr uint8_t kCapTcp = 0x02;
inline constexpr uint8_t kCapAll = kCapRdma | kCapTcp;
uint8_t transport_cap(Transport t);
// The best transport both support (RDMA over TCP); nullopt when they share none.
std::optional<Transport> choose_transport(uint8_t caps_a, uint8_t caps_b);

// Path MTUs an RC QP can use: 256, 512, 1024, 2048, 4096 bytes.
bool valid_rdma_mtu(uint16_t mtu);
// The lower of the two; 0 ("no RDMA side", tcp) yields the other.
uint16_t negotiate_mtu(uint16_t a, uint16_t b);

inline constexpr uint32_t kMaxPsn = 0xffffff;  // 24 bits

// The body in host form. Fields about "the sender" are the side that wrote the message: the
// initiator in REQ and RTU, the target in REP.
struct ConnParams {
    uint64_t conn_id = 0;  // chosen by the initiator, random, never 0
    ProcessId initiator;
    ProcessId target;
    ConnStatus status = ConnStatus::ok;  // REP only; 0 in REQ and RTU
    uint8_t caps = 0;
    uint32_t qpn = 0;  // the sender's QP number (RDMA)
    uint32_t psn = 0;  // the sender's starting packet sequence number (RDMA), random
    uint16_t mtu = 0;  // the sender's path MTU in bytes (RDMA); 0 with tcp only
    std::array<uint8_t, 16> gid{};
    // tcp: in REP, where the initiator connects. The target writes its own endpoint; each gateway
    // rewrites it to the mapped address:port that works on the next hop (host order).
    uint32_t ipv4 = 0;
    uint16_t port = 0;
    // RDMA: the sender's receive ring, which the other side fills with RDMA WRITE.
    uint32_t rkey = 0;
    uint64_t raddr = 0;
    uint32_t rlen = 0;
    bool operator==(const ConnParams&) const = default;
};

#pragma pack(push, 1)
struct ConnBody {
    uint8_t conn_id[8];
    uint8_t initiator[8];
    uint8_t target[8];
    uint8_t status;
    uint8_t caps;
    uint8_t reserved[2];
    uint8_t qpn[4];
    uint8_t psn[4];
    uint8_t mtu[2];
    uint8_t port[2];
    uint8_t ipv4[4];
    uint8_t gid[16];
    uint8_t rkey[4];
    uint8_t raddr[8];
    uint8_t rlen[4];
};
#pragma pack(pop)
static_assert(sizeof(ConnBody) == 76);

// The REP refusing `req`: its IDs, `why`, and nothing else.
ConnParams conn_refusal(const ConnParams& req, ConnStatus why);
// Counts `s` in a per-status array (ConnStatus values index it).
inline void count_conn_status(std::array<uint64_t, 10>& by_status, ConnStatus s) {
    const auto i = static_cast<std::size_t>(s);
    if (i < by_status.size()) ++by_status[i];
}

void encode(const ConnParams& p, ConnBody& w);
// Rejects a zero conn_id or initiator or target, an unknown status, caps outside kCapAll, a QP
// number or PSN over 24 bits, and non-zero reserved bytes.
std::optional<ConnParams> decode(const ConnBody& w);

// The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d, what RoCE v2 uses for an IPv4 address),
// host order; empty for any other GID.
std::optional<uint32_t> gid_ipv4(const std::array<uint8_t, 16>& gid);
std::array<uint8_t, 16> ipv4_gid(uint32_t host_addr);
// A connection ID as every tool prints it: "0x" and 16 hex digits.
std::string format_conn_id(uint64_t id);

}  // namespace fedgate
