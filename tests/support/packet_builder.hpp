// The one packet builder for tests, fuzz seeds and benchmarks: stacks headers, then fills in
// lengths and checksums. Checksums use its own RFC 1071 routine, independent of DPDK's, so tests
// that check the data plane's checksums are not checking DPDK against itself.
#pragma once

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace fedgate::test {

using Mac = std::array<uint8_t, 6>;
inline constexpr Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

// Host-order IPv4 from dotted text; throws on typos so a bad fixture fails loudly.
inline uint32_t ip(const std::string& s) {
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1) throw std::invalid_argument("bad IPv4 in test: " + s);
    return ntohl(a.s_addr);
}

// RFC 1071 one's-complement sum, folded, not inverted.
inline uint32_t sum16(const uint8_t* p, std::size_t n, uint32_t acc = 0) {
    for (std::size_t i = 0; i + 1 < n; i += 2) acc += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
    if (n & 1) acc += static_cast<uint32_t>(p[n - 1] << 8);
    while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
    return acc;
}
inline uint16_t inet_checksum(const uint8_t* p, std::size_t n, uint32_t acc = 0) {
    return static_cast<uint16_t>(~sum16(p, n, acc) & 0xffff);
}

class PacketBuilder {
public:
    enum class Kind { eth, vlan, arp, ipv4, icmp, udp, tcp, raw, bth, icrc };

    PacketBuilder& eth(const Mac& dst, const Mac& src) {
        push(Kind::eth, 14);
        std::memcpy(&buf_[at()], dst.data(), 6);
        std::memcpy(&buf_[at() + 6], src.data(), 6);
        return *this;
    }
    PacketBuilder& vlan(uint16_t id) {
        push(Kind::vlan, 4);
        put16(at(), id & 0x0fff);
        return *this;
    }
    PacketBuilder& arp(uint16_t op, const Mac& sha, const std::string& sip, const Mac& tha, const std::string& tip) {
        push(Kind::arp, 28);
        const std::size_t o = at();
        put16(o, 1), put16(o + 2, 0x0800), buf_[o + 4] = 6, buf_[o + 5] = 4, put16(o + 6, op);
        std::memcpy(&buf_[o + 8], sha.data(), 6), put32(o + 14, ip(sip));
        std::memcpy(&buf_[o + 18], tha.data(), 6), put32(o + 24, ip(tip));
        return *this;
    }
    PacketBuilder& ipv4(const std::string& src, const std::string& dst, uint8_t ttl = 64, uint16_t id = 1) {
        push(Kind::ipv4, 20);
        const std::size_t o = at();
        buf_[o] = 0x45, put16(o + 4, id), buf_[o + 8] = ttl;
        put32(o + 12, ip(src)), put32(o + 16, ip(dst));
        return *this;
    }
    // Flags and fragment offset (in 8-byte units) of the last IPv4 header.
    PacketBuilder& fragment(bool more, uint16_t offset8) {
        put16(layer(Kind::ipv4), static_cast<uint16_t>((more ? 0x2000 : 0) | offset8), 6);
        return *this;
    }
    PacketBuilder& ip_proto(uint8_t proto) {  // for protocols the builder has no layer for
        buf_[layer(Kind::ipv4) + 9] = proto;
        return *this;
    }
    PacketBuilder& icmp(uint8_t type, uint8_t code, uint16_t ident, uint16_t seq) {
        push(Kind::icmp, 8);
        const std::size_t o = at();
        buf_[o] = type, buf_[o + 1] = code, put16(o + 4, ident), put16(o + 6, seq);
        return *this;
    }
    PacketBuilder& udp(uint16_t sport, uint16_t dport) {
        push(Kind::udp, 8);
        put16(at(), sport), put16(at() + 2, dport);
        return *this;
    }
    // RoCE v2 sends UDP with checksum 0; the data plane must keep it 0.
    PacketBuilder& udp_no_checksum() {
        udp_zero_ = true;
        return *this;
    }
    // A RoCE v2 base transport header (after udp(..., 4791)); end the packet with icrc().
    PacketBuilder& bth(uint8_t opcode, uint32_t dqpn, uint32_t psn, uint8_t fecn_becn = 0, bool ackreq = false) {
        push(Kind::bth, 12);
        const std::size_t o = at();
        buf_[o] = opcode, put16(o + 2, 0xffff);
        put32(o + 4, (uint32_t{fecn_becn} << 24) | (dqpn & 0xffffff));
        put32(o + 8, (ackreq ? 0x80000000u : 0) | (psn & 0xffffff));
        return *this;
    }
    // The ICRC, computed in build() by the builder's own bitwise CRC-32 (not DPDK's).
    PacketBuilder& icrc() {
        push(Kind::icrc, 4);
        return *this;
    }
    PacketBuilder& tcp(uint16_t sport, uint16_t dport, uint8_t flags = 0x02, uint32_t seq = 1000) {
        push(Kind::tcp, 20);
        const std::size_t o = at();
        put16(o, sport), put16(o + 2, dport), put32(o + 4, seq), buf_[o + 12] = 5 << 4, buf_[o + 13] = flags;
        put16(o + 14, 65535);
        return *this;
    }
    PacketBuilder& payload(const std::vector<uint8_t>& bytes) {
        push(Kind::raw, bytes.size());
        if (!bytes.empty()) std::memcpy(buf_.data() + at(), bytes.data(), bytes.size());
        return *this;
    }
    PacketBuilder& payload(std::size_t n, uint8_t first = 0) {
        std::vector<uint8_t> b(n);
        for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(first + i);
        return payload(b);
    }

    // Fills EtherTypes, lengths and checksums.
    std::vector<uint8_t> build() const {
        std::vector<uint8_t> out = buf_;
        if (!layers_.empty() && layers_.back().first == Kind::icrc) fill_icrc(out);
        for (std::size_t i = 0; i < layers_.size(); ++i) {
            const auto [kind, off] = layers_[i];
            const std::size_t end = out.size();
            if (kind == Kind::eth || kind == Kind::vlan) {
                const std::size_t type_at = kind == Kind::eth ? off + 12 : off + 2;
                const Kind next = i + 1 < layers_.size() ? layers_[i + 1].first : Kind::raw;
                const uint16_t type = next == Kind::vlan ? 0x8100 : next == Kind::arp ? 0x0806 : next == Kind::ipv4 ? 0x0800 : 0x88b5;
                put16(out, type_at, type);
            } else if (kind == Kind::ipv4) {
                put16(out, off + 2, static_cast<uint16_t>(end - off));
                const Kind next = i + 1 < layers_.size() ? layers_[i + 1].first : Kind::raw;
                if (next == Kind::icmp) out[off + 9] = 1;
                if (next == Kind::tcp) out[off + 9] = 6;
                if (next == Kind::udp) out[off + 9] = 17;
                put16(out, off + 10, 0);
                put16(out, off + 10, inet_checksum(&out[off], 20));
            } else if (kind == Kind::icmp) {
                put16(out, off + 2, 0);
                put16(out, off + 2, inet_checksum(&out[off], end - off));
            } else if (kind == Kind::udp || kind == Kind::tcp) {
                const std::size_t ip_off = layers_[i - 1].second;
                const std::size_t csum_at = kind == Kind::udp ? off + 6 : off + 16;
                if (kind == Kind::udp) put16(out, off + 4, static_cast<uint16_t>(end - off));
                put16(out, csum_at, 0);
                uint16_t c = inet_checksum(&out[off], end - off, pseudo_sum(out, ip_off, end - off));
                if (kind == Kind::udp && c == 0) c = 0xffff;
                if (kind == Kind::udp && udp_zero_) c = 0;
                put16(out, csum_at, c);
            }
        }
        return out;
    }

    // Sum of the IPv4 pseudo-header for an L4 segment of `len` bytes (for checks in tests).
    static uint32_t pseudo_sum(const std::vector<uint8_t>& pkt, std::size_t ip_off, std::size_t len) {
        uint8_t ph[12];
        std::memcpy(ph, &pkt[ip_off + 12], 8);
        ph[8] = 0, ph[9] = pkt[ip_off + 9];
        ph[10] = static_cast<uint8_t>(len >> 8), ph[11] = static_cast<uint8_t>(len);
        return sum16(ph, 12);
    }

    // Bitwise CRC-32 (IEEE 802.3, reflected; zlib's crc32).
    static uint32_t crc32(const uint8_t* p, std::size_t n) {
        uint32_t c = 0xffffffff;
        for (std::size_t i = 0; i < n; ++i) {
            c ^= p[i];
            for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320 & (0u - (c & 1)));
        }
        return ~c;
    }
    // The RoCE v2 ICRC of the IPv4 packet at `ip_off` (ICRC as its last 4 bytes): CRC-32 over 8
    // bytes of ones, then the packet with TOS, TTL, checksums and the BTH's FECN/BECN byte as ones.
    static uint32_t roce_icrc(const std::vector<uint8_t>& pkt, std::size_t ip_off) {
        const std::size_t ip_len = get16_(pkt, ip_off + 2);
        std::vector<uint8_t> m(8, 0xff);
        m.insert(m.end(), pkt.begin() + static_cast<long>(ip_off), pkt.begin() + static_cast<long>(ip_off + ip_len - 4));
        uint8_t* q = m.data() + 8;
        const std::size_t ihl = (q[0] & 0x0f) * 4u;
        q[1] = 0xff, q[8] = 0xff, q[10] = q[11] = 0xff;
        q[ihl + 6] = q[ihl + 7] = 0xff;
        q[ihl + 8 + 4] = 0xff;
        return crc32(m.data(), m.size());
    }

private:
    static uint16_t get16_(const std::vector<uint8_t>& b, std::size_t off) {
        return static_cast<uint16_t>(b[off] << 8 | b[off + 1]);
    }
    void fill_icrc(std::vector<uint8_t>& out) const {
        const std::size_t ip_off = layer(Kind::ipv4), udp_off = layer(Kind::udp), end = out.size();
        put16(out, ip_off + 2, static_cast<uint16_t>(end - ip_off));
        out[ip_off + 9] = 17;
        put16(out, udp_off + 4, static_cast<uint16_t>(end - udp_off));
        const uint32_t c = roce_icrc(out, ip_off);
        for (int i = 0; i < 4; ++i) out[end - 4 + i] = static_cast<uint8_t>(c >> (8 * i));  // little-endian
    }
    void push(Kind k, std::size_t n) {
        layers_.emplace_back(k, buf_.size());
        buf_.resize(buf_.size() + n, 0);
    }
    std::size_t at() const { return layers_.back().second; }
    std::size_t layer(Kind k) const {
        for (auto it = layers_.rbegin(); it != layers_.rend(); ++it)
            if (it->first == k) return it->second;
        throw std::logic_error("no such layer yet");
    }
    void put16(std::size_t off, uint16_t v, std::size_t plus = 0) { put16(buf_, off + plus, v); }
    void put32(std::size_t off, uint32_t v) {
        put16(buf_, off, static_cast<uint16_t>(v >> 16));
        put16(buf_, off + 2, static_cast<uint16_t>(v));
    }
    static void put16(std::vector<uint8_t>& b, std::size_t off, uint16_t v) {
        b[off] = static_cast<uint8_t>(v >> 8);
        b[off + 1] = static_cast<uint8_t>(v);
    }

    std::vector<uint8_t> buf_;
    std::vector<std::pair<Kind, std::size_t>> layers_;
    bool udp_zero_ = false;
};

inline uint16_t get16(const std::vector<uint8_t>& b, std::size_t off) {
    return static_cast<uint16_t>(b[off] << 8 | b[off + 1]);
}
inline uint32_t get32(const std::vector<uint8_t>& b, std::size_t off) {
    return static_cast<uint32_t>(get16(b, off)) << 16 | get16(b, off + 2);
}

}  // namespace fedgate::test
