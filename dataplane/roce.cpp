// RoCE v2 ICRC: the full computation (rte_net_crc) and the incremental update's GF(2) arithmetic.
#include "dataplane/roce.hpp"

#include <rte_net_crc.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <array>
#include <vector>

namespace fedgate {
namespace {

// CRC-32 (IEEE 802.3), reflected: bit 31 of a register is the coefficient of x^0.
constexpr uint32_t kPolyReflected = 0xedb88320;

struct IcrcTables {
    std::array<uint32_t, 256> byte{};                  // one zero byte fed into the register: * x^8
    std::array<uint32_t, kIcrcMaxTail + 1> x8n{};      // x^(8n) mod P
    bool clmul = false;

    IcrcTables() {
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t r = i;
            for (int k = 0; k < 8; ++k) r = (r >> 1) ^ (kPolyReflected & (0u - (r & 1)));
            byte[i] = r;
        }
        x8n[0] = 0x80000000u;  // x^0
        for (std::size_t n = 1; n < x8n.size(); ++n) x8n[n] = times_x8(x8n[n - 1]);
#if defined(__x86_64__)
        clmul = __builtin_cpu_supports("pclmul");
#endif
        // rte_net_crc stays on its default (scalar) handlers: choosing SIMD ones needs the EAL's
        // SIMD setting, which is not there before main, and only control threads compute in full.
    }
    uint32_t times_x8(uint32_t r) const { return (r >> 8) ^ byte[r & 0xff]; }
};

const IcrcTables& tables() {
    static const IcrcTables t;
    return t;
}
// Built before main; the per-packet path reads it without the function-local static's guard.
const IcrcTables* const g_tables = &tables();

// a * b mod P, both reflected. Bit 31 - i of `a` is its x^i coefficient; `b` is multiplied by x
// once per step (a right shift, reduced when x^32 falls out).
uint32_t mulmod_portable(uint32_t a, uint32_t b) {
    uint32_t p = 0;
    for (int i = 0; i < 32; ++i) {
        p ^= b & (0u - ((a >> (31 - i)) & 1));
        b = (b >> 1) ^ (kPolyReflected & (0u - (b & 1)));
    }
    return p;
}

#if defined(__x86_64__)
// The same with one carry-less multiply: for reflected operands, clmul(a, b) << 1 is the 63-degree
// product with bit 63 as x^0. Its high half is the product's x^0..x^31; its low half, read as a
// reflected register, is the rest divided by x^32: four zero bytes fed through the CRC table
// multiply it back by x^32 mod P.
__attribute__((target("pclmul,sse2"))) uint32_t mulmod_clmul(uint32_t a, uint32_t b) {
    const __m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(a)),
                                              _mm_cvtsi32_si128(static_cast<int>(b)), 0x00);
    const uint64_t v = static_cast<uint64_t>(_mm_cvtsi128_si64(prod)) << 1;
    const IcrcTables& t = *g_tables;
    uint32_t lo = static_cast<uint32_t>(v);
    lo = t.times_x8(lo);
    lo = t.times_x8(lo);
    lo = t.times_x8(lo);
    lo = t.times_x8(lo);
    return static_cast<uint32_t>(v >> 32) ^ lo;
}
#endif

uint32_t crc32_eth(const uint8_t* d, uint32_t len) { return rte_net_crc_calc(d, len, RTE_NET_CRC32_ETH); }

}  // namespace

uint16_t rdma_mtu_for_ip_mtu(uint32_t ip_mtu) {
    for (uint16_t m = 4096; m >= 256; m /= 2)
        if (m + kRoceIpv4Overhead + kRoceMaxExtHeader <= ip_mtu) return m;
    return 0;
}

uint32_t icrc_compute(const uint8_t* ip, uint32_t ip_len) {
    // The pseudo-packet: 8 bytes of ones for the LRH RoCE v2 does not have, then IPv4, UDP, BTH and
    // payload with the fields that change on the way (TOS, TTL, checksums, FECN/BECN) as ones.
    if (ip_len < kRoceIpv4Overhead) return 0;
    std::vector<uint8_t> buf(8 + ip_len - kIcrcLen, 0xff);
    std::memcpy(buf.data() + 8, ip, ip_len - kIcrcLen);
    uint8_t* p = buf.data() + 8;
    p[1] = 0xff;                   // TOS (DSCP, ECN)
    p[8] = 0xff;                   // TTL
    p[10] = p[11] = 0xff;          // header checksum
    p[20 + 6] = p[20 + 7] = 0xff;  // UDP checksum
    p[28 + 4] = 0xff;              // BTH: FECN, BECN, reserved
    return crc32_eth(buf.data(), static_cast<uint32_t>(buf.size()));
}

uint32_t icrc_header_delta(uint32_t src, uint32_t dst, uint32_t dqpn, uint32_t new_src, uint32_t new_dst,
                           uint32_t new_dqpn) {
    // Pseudo-packet bytes 20..47: IPv4 source and destination, UDP header, BTH.
    uint8_t d[28] = {};
    const uint32_t s = src ^ new_src, t = dst ^ new_dst, q = (dqpn ^ new_dqpn) & kQpnMask;
    std::memcpy(d, &s, 4);
    std::memcpy(d + 4, &t, 4);
    d[16 + 5] = static_cast<uint8_t>(q >> 16);
    d[16 + 6] = static_cast<uint8_t>(q >> 8);
    d[16 + 7] = static_cast<uint8_t>(q);
    static const uint8_t zeros[sizeof d] = {};
    // crc(M) = lin(M) ^ crc(0...0) for any M of that length.
    return crc32_eth(d, sizeof d) ^ crc32_eth(zeros, sizeof zeros);
}

void roce_prepare(RoceEntry& e, uint32_t old_src, uint32_t old_dst, uint32_t old_dqpn) {
    e.icrc_delta = icrc_header_delta(old_src, old_dst, old_dqpn, e.new_src, e.new_dst, e.new_dqpn);
    ChecksumDelta ip;
    ip.change32(old_src, e.new_src);
    ip.change32(old_dst, e.new_dst);
    e.ip_csum_delta = ip.folded();
    // The UDP checksum also covers the DestQP: BTH bytes 5..7, in the words at BTH offsets 4 and 6.
    // Byte 4 (FECN/BECN) is the same before and after, so it cancels: take it as 0.
    const uint8_t old_q[4] = {0, static_cast<uint8_t>(old_dqpn >> 16), static_cast<uint8_t>(old_dqpn >> 8),
                              static_cast<uint8_t>(old_dqpn)};
    const uint8_t new_q[4] = {0, static_cast<uint8_t>(e.new_dqpn >> 16), static_cast<uint8_t>(e.new_dqpn >> 8),
                              static_cast<uint8_t>(e.new_dqpn)};
    uint32_t oq, nq;
    std::memcpy(&oq, old_q, 4);
    std::memcpy(&nq, new_q, 4);
    ChecksumDelta udp = ip;
    udp.change32(oq, nq);
    e.udp_csum_delta = udp.folded();
}

uint32_t icrc_shift(uint32_t header_delta, uint32_t tail) {
    const IcrcTables& t = *g_tables;
#if defined(__x86_64__)
    if (t.clmul) return mulmod_clmul(header_delta, t.x8n[tail]);
#endif
    return mulmod_portable(header_delta, t.x8n[tail]);
}

uint32_t icrc_shift_portable(uint32_t header_delta, uint32_t tail) {
    return mulmod_portable(header_delta, tables().x8n[tail]);
}

}  // namespace fedgate
