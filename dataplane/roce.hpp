// RoCE v2 as the gateways carry it: the BTH after UDP port 4791, which opcodes are translated, the
// ICRC (in full with DPDK's rte_net_crc, and updated incrementally when fixed header fields are
// rewritten), and the translation table that control threads write and the lcore reads.
//
// Incremental ICRC. CRC-32 is affine: for messages of one length, crc(M') = crc(M) ^ lin(M ^ M'),
// where lin is the CRC with neither initial value nor final xor. A translation changes the IPv4
// source and destination and the BTH DestQP only; every other changed field (TTL, TOS, checksums,
// the FECN/BECN byte) is masked to ones in the ICRC and cancels. So M ^ M' is a fixed 28-byte
// pattern D (known per translation: the old values are checked, the new ones are the entry's)
// followed by the L bytes from the end of the BTH to the ICRC, all zero, and
//   lin(D || 0^L) = lin(D) * x^(8L) mod P
// one multiplication in GF(2)[x]/P with a table of x^(8L): the cost does not depend on the payload,
// and a packet whose ICRC was wrong stays wrong by the same bits.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#include "dataplane/checksum.hpp"
#include "dataplane/counters.hpp"
#include "dataplane/packet.hpp"

namespace fedgate {

inline constexpr uint16_t kRoceV2Port = 4791;
inline constexpr uint32_t kBthLen = 12;
inline constexpr uint32_t kIcrcLen = 4;
inline constexpr uint32_t kRoceIpv4Overhead = 20 + 8 + kBthLen + kIcrcLen;  // IPv4+UDP+BTH+ICRC: 44
// The largest extended transport header before a payload (RETH 16; AtomicETH carries none).
inline constexpr uint32_t kRoceMaxExtHeader = 16;
inline constexpr uint8_t kOpCnp = 0x81;
inline constexpr uint32_t kQpnMask = 0xffffff;
// The longest tail (bytes from the end of the BTH to the ICRC) the incremental update handles.
inline constexpr uint32_t kIcrcMaxTail = 16384;

// RC opcodes that carry a DestQP the gateway translates: SEND, RDMA WRITE, READ request and
// response, ACK, atomic ACK, compare-swap, fetch-add, SEND with invalidate; and CNP.
constexpr bool roce_opcode_translated(uint8_t op) { return op <= 0x14 || op == 0x16 || op == 0x17 || op == kOpCnp; }

constexpr uint32_t bth_dqpn(const uint8_t* bth) {
    return uint32_t{bth[5]} << 16 | uint32_t{bth[6]} << 8 | bth[7];
}
inline void set_bth_dqpn(uint8_t* bth, uint32_t qpn) {
    bth[5] = static_cast<uint8_t>(qpn >> 16);
    bth[6] = static_cast<uint8_t>(qpn >> 8);
    bth[7] = static_cast<uint8_t>(qpn);
}

// Whether a parsed UDP packet to port 4791, `frame_len` bytes in one segment, is a RoCE v2 packet
// the gateway can translate: IPv4 without options, room for BTH and ICRC, a tail roce_rewrite
// handles, a translated opcode. DropReason::none, or roce_malformed / roce_opcode_unsupported.
inline DropReason roce_check(const uint8_t* frame, uint32_t frame_len, const ParsedPacket& p) {
    const uint32_t ip_len = p.l3_len;
    if (p.l4_offset != p.l3_offset + 20 || ip_len < kRoceIpv4Overhead || ip_len > kRoceIpv4Overhead + kIcrcMaxTail ||
        frame_len < uint32_t{p.l3_offset} + ip_len)
        return DropReason::roce_malformed;
    if (!roce_opcode_translated(frame[p.l3_offset + 28])) return DropReason::roce_opcode_unsupported;
    return DropReason::none;
}

// The largest RDMA path MTU (256..4096) whose packets fit in an IPv4 MTU of `ip_mtu` bytes with
// the largest header a packet carries; 0 when not even 256 fits.
uint16_t rdma_mtu_for_ip_mtu(uint32_t ip_mtu);

// ---- ICRC -------------------------------------------------------------------------------------

// The ICRC of a RoCE v2 packet whose IPv4 header (20 bytes, no options) starts at `ip`, computed
// in full (rte_net_crc) over the masked pseudo-header and everything up to the ICRC; `ip_len` is
// the IPv4 total length, ICRC included. Returns the CRC as a number; on the wire it is stored
// little-endian (icrc_load/icrc_store). For tests and tools: it reads the whole payload.
uint32_t icrc_compute(const uint8_t* ip, uint32_t ip_len);
inline uint32_t icrc_load(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
inline void icrc_store(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
    p[2] = static_cast<uint8_t>(v >> 16);
    p[3] = static_cast<uint8_t>(v >> 24);
}

// lin(D) of a translation that rewrites (src, dst, dqpn) to (new_src, new_dst, new_dqpn);
// addresses as stored in the packet (network order), QPNs 24-bit numbers. Control threads.
uint32_t icrc_header_delta(uint32_t src, uint32_t dst, uint32_t dqpn, uint32_t new_src, uint32_t new_dst,
                           uint32_t new_dqpn);
// What to xor into the ICRC of a packet with `tail` bytes after its BTH (tail <= kIcrcMaxTail).
uint32_t icrc_shift(uint32_t header_delta, uint32_t tail);
// The same product without a carry-less multiply instruction (tests compare the two).
uint32_t icrc_shift_portable(uint32_t header_delta, uint32_t tail);

// ---- translation table ------------------------------------------------------------------------

// Which side of the gateway a packet arrives on; each side has its own virtual QPN space.
enum class RoceSide : uint8_t { internal = 0, external = 1 };
inline constexpr uint32_t kRoceFreeKey = 0xffffffff;  // over 24 bits: matches no DestQP

// One direction of one connection on one side: packets arriving on `side` for DestQP `vqpn` from
// `expect_src` leave from `new_src` to `new_dst`, DestQP `new_dqpn`, through `out_port`. Control
// threads fill the fields while the key is free and publish the key last (release); after clearing
// it they wait an RCU grace period before the slot is used again, so the lcore never sees a half
// written entry. The counters have one writer, the lcore.
struct alignas(64) RoceEntry {
    std::atomic<uint32_t> key{kRoceFreeKey};  // the virtual QPN, or kRoceFreeKey
    uint32_t expect_src = 0;                  // network order
    uint32_t new_src = 0, new_dst = 0;        // network order
    uint32_t new_dqpn = 0;
    uint32_t icrc_delta = 0;                  // icrc_header_delta of this rewrite
    uint32_t next_hop = 0;                    // network order
    uint16_t out_port = 0;
    uint16_t ip_csum_delta = 0;               // folded: the address change
    uint16_t udp_csum_delta = 0;              // folded: addresses (pseudo-header) and DestQP
    Counter packets, bytes;                   // IPv4 bytes
    // The lcore's own memo of the last ICRC shift: a connection's packets come in few lengths (full
    // MTU, ACKs), so most packets skip the multiplication. Reset before the key is published.
    uint32_t memo_tail = UINT32_MAX, memo_xor = 0;
};

// The two sides' tables, `size` slots each (a power of two): a virtual QPN's low bits are its slot.
struct RoceView {
    RoceEntry* side[2] = {nullptr, nullptr};
    uint32_t mask = 0;
    RoceEntry* find(RoceSide s, uint32_t dqpn) const {
        RoceEntry& e = side[static_cast<int>(s)][dqpn & mask];
        return e.key.load(std::memory_order_acquire) == dqpn ? &e : nullptr;
    }
    RoceEntry* slot(RoceSide s, uint32_t vqpn) const { return &side[static_cast<int>(s)][vqpn & mask]; }
};

// Fills `e`'s derived fields (ICRC and checksum deltas) for a rewrite of packets that arrive
// from `old_src` to `old_dst` (network order) with DestQP `old_dqpn` into e's new_* values.
// Control threads, before the key is published.
void roce_prepare(RoceEntry& e, uint32_t old_src, uint32_t old_dst, uint32_t old_dqpn);

// Rewrites the RoCE v2 packet at `ip` (IPv4 without options, UDP, BTH ... ICRC; `ip_len` its total
// length, between kRoceIpv4Overhead and kRoceIpv4Overhead + kIcrcMaxTail) from e's old values to
// its new ones, TTL decremented (the caller checked it is above 1). DSCP/ECN and everything else
// stay; the header checksum, a non-zero UDP checksum and the ICRC are updated from the deltas.
inline void roce_rewrite(uint8_t* ip, uint32_t ip_len, RoceEntry& e) {
    // The TTL word before and after, built in registers (reading it back after the byte store
    // would stall on store forwarding).
    const uint8_t ttl_bytes[2] = {ip[8], ip[9]}, dec_bytes[2] = {static_cast<uint8_t>(ip[8] - 1), ip[9]};
    uint16_t ttl_old, ttl_new, csum;
    std::memcpy(&ttl_old, ttl_bytes, 2);
    std::memcpy(&ttl_new, dec_bytes, 2);
    ip[8] = dec_bytes[0];
    std::memcpy(&csum, ip + 10, 2);
    csum = checksum_add(checksum_adjust(csum, ttl_old, ttl_new), e.ip_csum_delta);
    std::memcpy(ip + 10, &csum, 2);
    std::memcpy(ip + 12, &e.new_src, 4);
    std::memcpy(ip + 16, &e.new_dst, 4);
    uint8_t* udp = ip + 20;
    set_bth_dqpn(udp + 8, e.new_dqpn);
    uint8_t* icrc = ip + ip_len - kIcrcLen;
    const uint32_t old_icrc = icrc_load(icrc);
    const uint32_t tail = ip_len - kRoceIpv4Overhead;
    if (tail != e.memo_tail) {
        e.memo_xor = icrc_shift(e.icrc_delta, tail);
        e.memo_tail = tail;
    }
    const uint32_t new_icrc = old_icrc ^ e.memo_xor;
    icrc_store(icrc, new_icrc);
    uint16_t ucsum;
    std::memcpy(&ucsum, udp + 6, 2);
    if (ucsum != 0) {  // RoCE v2 senders usually leave it 0, which stays 0
        // It covers the ICRC too. At an odd offset from the UDP header the ICRC's bytes pair with
        // their neighbours, and the one's-complement sum of its change comes out byte-swapped.
        uint8_t o[4], n[4];
        icrc_store(o, old_icrc);
        icrc_store(n, new_icrc);
        uint32_t ow, nw;
        std::memcpy(&ow, o, 4);
        std::memcpy(&nw, n, 4);
        ChecksumDelta d;
        d.change32(ow, nw);
        uint16_t icrc_delta = d.folded();
        if (((ip_len - 20 - kIcrcLen) & 1) != 0) icrc_delta = static_cast<uint16_t>(icrc_delta << 8 | icrc_delta >> 8);
        ucsum = checksum_add(checksum_add(ucsum, e.udp_csum_delta), icrc_delta);
        if (ucsum == 0) ucsum = 0xffff;
        std::memcpy(udp + 6, &ucsum, 2);
    }
}

}  // namespace fedgate
