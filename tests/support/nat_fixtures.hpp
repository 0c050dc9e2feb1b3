// Packet fixtures for the port-map NAT, Katran style: {description, input frame, expected verdict,
// expected output frame}, replayed in order on one NatRig by the unit tests and by the benchmark.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataplane/nat.hpp"
#include "dataplane/packet.hpp"
#include "tests/support/packet_builder.hpp"

namespace fedgate::test {

// The gateway under test: port 0 internal, port 1 external. It serves imports (its nodes reaching
// the peer) and exports (the peer reaching its node) at once.
inline constexpr const char* kInternalAddr = "198.18.1.1";
inline constexpr const char* kExternalAddr = "198.19.0.1";
inline constexpr const char* kNode = "198.18.1.10";         // a node the imports allow
inline constexpr const char* kDeniedNode = "198.18.1.200";  // outside the TCP import's allowed /25
inline constexpr const char* kExportNode = "198.18.1.20";   // the node behind the exports
inline constexpr const char* kPeer = "198.19.0.2";          // the peer gateway's external address
inline constexpr const char* kStranger = "198.19.0.3";      // a gateway no export allows

inline constexpr uint16_t kImportTcpPort = 5000, kImportUdpPort = 5001;  // P, on the internal address
inline constexpr uint16_t kPeerTcpPort = 6000, kPeerUdpPort = 6001;      // Q, on the peer's address
inline constexpr uint16_t kExportTcpPort = 7000, kExportUdpPort = 7001;  // Q, on the external address
inline constexpr uint16_t kNodeTcpPort = 8000, kNodeUdpPort = 8001;      // R, on the export node
// NatConfig's default port_lo: pools hand ports out FIFO from here, one pool per (side, protocol).
inline constexpr uint16_t kFirstNatPort = 20000;

inline constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;

// The NAT leaves Ethernet alone (the caller rewrites MACs on transmit), so one pair serves all frames.
inline constexpr Mac kGatewayMac{0x02, 0, 0, 0, 0, 0x01}, kNeighbourMac{0x02, 0, 0, 0, 0, 0x02};

inline uint32_t net_addr(const char* dotted) { return htonl(ip(dotted)); }

inline std::vector<uint8_t> tcp_frame(const char* src, uint16_t sport, const char* dst, uint16_t dport, uint8_t flags,
                                      uint32_t seq = 1000, std::size_t payload = 0, uint8_t ttl = 64,
                                      uint16_t ip_id = 0x4242) {
    PacketBuilder b;
    b.eth(kGatewayMac, kNeighbourMac).ipv4(src, dst, ttl, ip_id).tcp(sport, dport, flags, seq);
    if (payload != 0) b.payload(payload, static_cast<uint8_t>(seq));
    return b.build();
}

inline std::vector<uint8_t> udp_frame(const char* src, uint16_t sport, const char* dst, uint16_t dport,
                                      std::size_t payload = 32, uint8_t ttl = 64, uint16_t ip_id = 0x4242) {
    PacketBuilder b;
    b.eth(kGatewayMac, kNeighbourMac).ipv4(src, dst, ttl, ip_id).udp(sport, dport);
    if (payload != 0) b.payload(payload, static_cast<uint8_t>(payload));  // the NAT must not touch it
    return b.build();
}

// A TCP segment whose header carries `options` (a multiple of 4 bytes), checksummed by the builder's
// routine after the data offset is set.
inline std::vector<uint8_t> tcp_frame_with_options(const char* src, uint16_t sport, const char* dst, uint16_t dport,
                                                   uint8_t flags, const std::vector<uint8_t>& options,
                                                   uint8_t ttl = 64) {
    if (options.size() % 4 != 0 || options.size() > 40) throw std::invalid_argument("bad TCP options in test");
    std::vector<uint8_t> f =
        PacketBuilder().eth(kGatewayMac, kNeighbourMac).ipv4(src, dst, ttl, 0x4242).tcp(sport, dport, flags).payload(options).build();
    const std::size_t l4 = 14 + 20, seg = f.size() - l4;
    f[l4 + 12] = static_cast<uint8_t>((20 + options.size()) / 4 << 4);
    f[l4 + 16] = f[l4 + 17] = 0;
    const uint16_t c = inet_checksum(&f[l4], seg, PacketBuilder::pseudo_sum(f, 14, seg));
    f[l4 + 16] = static_cast<uint8_t>(c >> 8), f[l4 + 17] = static_cast<uint8_t>(c);
    return f;
}

// The first `n` bytes (all by default) of a frame's IPv4 packet: what an ICMP error quotes.
inline std::vector<uint8_t> l3_of(const std::vector<uint8_t>& frame, std::size_t n = SIZE_MAX) {
    return {frame.begin() + 14, frame.begin() + 14 + static_cast<std::ptrdiff_t>(std::min(n, frame.size() - 14))};
}

inline std::vector<uint8_t> icmp_error_frame(const char* src, const char* dst, uint8_t type, uint8_t code,
                                             const std::vector<uint8_t>& quoted, uint8_t ttl = 64) {
    return PacketBuilder().eth(kGatewayMac, kNeighbourMac).ipv4(src, dst, ttl, 0x0101).icmp(type, code, 0, 0).payload(quoted).build();
}

// A UDP frame (untagged, 20-byte IPv4 header) sent without a checksum.
inline std::vector<uint8_t> without_udp_checksum(std::vector<uint8_t> frame) {
    frame.at(14 + 20 + 6) = 0;
    frame.at(14 + 20 + 7) = 0;
    return frame;
}

// Every route is on-link: the next hop is the destination itself.
inline int nat_fixture_route(const void*, uint32_t dst, uint32_t* next_hop) {
    const uint32_t host = ntohl(dst);
    const int port = (host & 0xffffff00u) == ip("198.18.1.0") ? 0 : (host & 0xffffff00u) == ip("198.19.0.0") ? 1 : -1;
    if (port >= 0) *next_hop = dst;
    return port;
}

// Defaults, but SYNs are clamped to MSS 1360.
inline NatConfig nat_fixture_config() {
    NatConfig c;
    c.mss_clamp = 1360;
    return c;
}

inline std::vector<NatPort> nat_fixture_ports() {
    return {NatPort{false, net_addr(kInternalAddr)}, NatPort{true, net_addr(kExternalAddr)}};
}

// A Nat with the fixtures' four rules published: TCP and UDP imports (the TCP one only from
// 198.18.1.0/25, the UDP one from anyone), TCP and UDP exports (only from kPeer).
class NatRig {
public:
    explicit NatRig(const NatConfig& cfg = nat_fixture_config())
        : nat(cfg, nat_fixture_ports(), &maps, nat_fixture_route, nullptr) {
        tcp_import.peer_addr = net_addr(kPeer);
        tcp_import.peer_port = htons(kPeerTcpPort);
        tcp_import.n_allow = 1;
        tcp_import.allow[0] = {net_addr("198.18.1.0"), htonl(0xffffff80u)};
        udp_import.peer_addr = net_addr(kPeer);
        udp_import.peer_port = htons(kPeerUdpPort);
        tcp_export.node_addr = net_addr(kExportNode);
        tcp_export.node_port = htons(kNodeTcpPort);
        tcp_export.n_peers = 1;
        tcp_export.peer_addrs[0] = net_addr(kPeer);
        udp_export = tcp_export;
        udp_export.node_port = htons(kNodeUdpPort);
        maps.publish(L4Proto::tcp, htons(kImportTcpPort), &tcp_import);
        maps.publish(L4Proto::udp, htons(kImportUdpPort), &udp_import);
        maps.publish(L4Proto::tcp, htons(kExportTcpPort), &tcp_export);
        maps.publish(L4Proto::udp, htons(kExportUdpPort), &udp_export);
    }
    NatRig(const NatRig&) = delete;
    NatRig& operator=(const NatRig&) = delete;

    // Parses `frame` and hands it to the NAT as the data plane would: TCP/UDP to handle(), ICMP
    // errors to handle_icmp_error(). A frame the data plane would not give the NAT is a broken fixture.
    Nat::Verdict handle(std::vector<uint8_t>& frame, uint16_t in_port, uint64_t now_ms) {
        ParsedPacket p;
        if (parse_packet(frame.data(), static_cast<uint32_t>(frame.size()), p) != DropReason::none || p.fragment)
            throw std::logic_error("NAT fixture frame does not parse or is a fragment");
        uint8_t* l3 = frame.data() + p.l3_offset;
        if (p.ip_proto == kIpProtoTcp || p.ip_proto == kIpProtoUdp) return nat.handle(l3, p, in_port, now_ms);
        if (p.ip_proto == kIpProtoIcmp && (p.icmp_type == 3 || p.icmp_type == 11 || p.icmp_type == 12))
            return nat.handle_icmp_error(l3, p);
        throw std::logic_error("NAT fixture frame is neither TCP/UDP nor an ICMP error");
    }

    PortMapView maps;
    ImportRule tcp_import, udp_import;
    ExportRule tcp_export, udp_export;
    Nat nat;
};

struct NatCase {
    std::string description;
    uint16_t in_port = 0;
    uint64_t now_ms = 0;
    std::vector<uint8_t> input;
    Nat::Verdict::Kind kind = Nat::Verdict::Kind::not_nat;
    DropReason reason = DropReason::none;  // drops only
    uint16_t out_port = 0;                 // forwards only; the next hop is then the output's destination
    std::vector<uint8_t> expected;         // the frame after handle(): rewritten if forwarded, else untouched
};

// The cases, to be replayed in order on one fresh NatRig (nat_fixture_config()): earlier cases open the
// sessions later ones use, and pools hand out ports in order, so the expected frames can name them.
inline std::vector<NatCase> nat_fixture_cases() {
    using Kind = Nat::Verdict::Kind;
    std::vector<NatCase> cases;
    uint64_t t = 1000;
    const auto forward = [&](std::string d, uint16_t in, std::vector<uint8_t> input, uint16_t out,
                             std::vector<uint8_t> expected) {
        cases.push_back({std::move(d), in, t++, std::move(input), Kind::forward, DropReason::none, out,
                         std::move(expected)});
    };
    const auto drop = [&](std::string d, uint16_t in, std::vector<uint8_t> input, DropReason why) {
        std::vector<uint8_t> same = input;
        cases.push_back({std::move(d), in, t++, std::move(input), Kind::drop, why, 0, std::move(same)});
    };
    const auto not_nat = [&](std::string d, uint16_t in, std::vector<uint8_t> input) {
        std::vector<uint8_t> same = input;
        cases.push_back({std::move(d), in, t++, std::move(input), Kind::not_nat, DropReason::none, 0, std::move(same)});
    };
    const uint16_t first = kFirstNatPort;

    // Import, TCP: node -> internal:P becomes external:allocated -> peer:Q, and back.
    forward("import TCP SYN from a node: source to external:first port, destination to peer:Q, TTL-1", 0,
            tcp_frame(kNode, 40000, kInternalAddr, kImportTcpPort, kSyn, 1000),  //
            1, tcp_frame(kExternalAddr, first, kPeer, kPeerTcpPort, kSyn, 1000, 0, 63));
    forward("import TCP SYN-ACK from the peer follows the session back to the node", 1,
            tcp_frame(kPeer, kPeerTcpPort, kExternalAddr, first, kSyn | kAck, 9000, 0, 60),  //
            0, tcp_frame(kInternalAddr, kImportTcpPort, kNode, 40000, kSyn | kAck, 9000, 0, 59));
    forward("import TCP data from the node (100 bytes)", 0,
            tcp_frame(kNode, 40000, kInternalAddr, kImportTcpPort, kAck | kPsh, 1001, 100, 64, 0x0001),  //
            1, tcp_frame(kExternalAddr, first, kPeer, kPeerTcpPort, kAck | kPsh, 1001, 100, 63, 0x0001));
    forward("import TCP data from the peer (odd length, 37 bytes)", 1,
            tcp_frame(kPeer, kPeerTcpPort, kExternalAddr, first, kAck | kPsh, 9001, 37, 2, 0xffff),  //
            0, tcp_frame(kInternalAddr, kImportTcpPort, kNode, 40000, kAck | kPsh, 9001, 37, 1, 0xffff));

    // Import, UDP: its own pool, so it starts from the first port too.
    forward("import UDP from a node: source to external:first port, destination to peer:Q", 0,
            udp_frame(kNode, 41000, kInternalAddr, kImportUdpPort, 32),  //
            1, udp_frame(kExternalAddr, first, kPeer, kPeerUdpPort, 32, 63));
    forward("import UDP reply from the peer (odd length) back to the node", 1,
            udp_frame(kPeer, kPeerUdpPort, kExternalAddr, first, 19, 255),  //
            0, udp_frame(kInternalAddr, kImportUdpPort, kNode, 41000, 19, 254));
    forward("import UDP without a checksum opens the next port and still has no checksum", 0,
            without_udp_checksum(udp_frame(kNode, 41001, kInternalAddr, kImportUdpPort, 10)),  //
            1, without_udp_checksum(udp_frame(kExternalAddr, first + 1, kPeer, kPeerUdpPort, 10, 63)));
    forward("import UDP reply without a checksum stays without one", 1,
            without_udp_checksum(udp_frame(kPeer, kPeerUdpPort, kExternalAddr, first + 1, 0)),  //
            0, without_udp_checksum(udp_frame(kInternalAddr, kImportUdpPort, kNode, 41001, 0, 63)));

    // Export: peer -> external:Q becomes internal:allocated -> node:R, and back. The internal pools
    // are separate from the external ones, so they start from the first port as well.
    forward("export TCP SYN from an allowed peer: source to internal:first port, destination to node:R", 1,
            tcp_frame(kPeer, 45000, kExternalAddr, kExportTcpPort, kSyn, 77),  //
            0, tcp_frame(kInternalAddr, first, kExportNode, kNodeTcpPort, kSyn, 77, 0, 63));
    forward("export TCP SYN-ACK from the node back to the peer", 0,
            tcp_frame(kExportNode, kNodeTcpPort, kInternalAddr, first, kSyn | kAck, 500),  //
            1, tcp_frame(kExternalAddr, kExportTcpPort, kPeer, 45000, kSyn | kAck, 500, 0, 63));
    forward("export UDP from an allowed peer to node:R", 1,
            udp_frame(kPeer, 45001, kExternalAddr, kExportUdpPort, 64),  //
            0, udp_frame(kInternalAddr, first, kExportNode, kNodeUdpPort, 64, 63));
    forward("export UDP reply from the node back to the peer", 0,
            udp_frame(kExportNode, kNodeUdpPort, kInternalAddr, first, 3),  //
            1, udp_frame(kExternalAddr, kExportUdpPort, kPeer, 45001, 3, 63));

    // ICMP errors about a session's packet go back to its sender, quoting it as the sender wrote it
    // (the quoted TTL is the one the error's sender saw).
    const std::vector<uint8_t> syn_as_sent = tcp_frame(kExternalAddr, first, kPeer, kPeerTcpPort, kSyn, 1000, 0, 63);
    forward("ICMP port unreachable from the peer about the import SYN goes back to the node, SYN restored", 1,
            icmp_error_frame(kPeer, kExternalAddr, 3, 3, l3_of(syn_as_sent)),  //
            0, icmp_error_frame(kInternalAddr, kNode, 3, 3,
                                l3_of(tcp_frame(kNode, 40000, kInternalAddr, kImportTcpPort, kSyn, 1000, 0, 63)), 63));
    forward("ICMP time exceeded from an internal router about an export datagram (header + 8 quoted) goes to the peer", 0,
            icmp_error_frame("198.18.1.254", kInternalAddr, 11, 0,
                             l3_of(udp_frame(kInternalAddr, first, kExportNode, kNodeUdpPort, 64, 63), 28)),  //
            1, icmp_error_frame(kExternalAddr, kPeer, 11, 0,
                                l3_of(udp_frame(kPeer, 45001, kExternalAddr, kExportUdpPort, 64, 63), 28), 63));

    // MSS clamping (to 1360 here) on SYNs only, wherever the option sits.
    const std::vector<uint8_t> mss1460{2, 4, 0x05, 0xb4}, mss1360{2, 4, 0x05, 0x50};
    forward("import TCP SYN announcing MSS 1460 leaves announcing the clamp, 1360", 0,
            tcp_frame_with_options(kNode, 40010, kInternalAddr, kImportTcpPort, kSyn, mss1460),  //
            1, tcp_frame_with_options(kExternalAddr, first + 1, kPeer, kPeerTcpPort, kSyn, mss1360, 63));
    forward("a SYN-ACK announcing less than the clamp keeps its MSS", 1,
            tcp_frame_with_options(kPeer, kPeerTcpPort, kExternalAddr, first + 1, kSyn | kAck, {1, 1, 2, 4, 4, 0, 0, 0}),
            0, tcp_frame_with_options(kInternalAddr, kImportTcpPort, kNode, 40010, kSyn | kAck, {1, 1, 2, 4, 4, 0, 0, 0}, 63));
    forward("MSS 9000 at an odd offset (after one NOP) is clamped too", 0,
            tcp_frame_with_options(kNode, 40011, kInternalAddr, kImportTcpPort, kSyn, {1, 2, 4, 0x23, 0x28, 1, 1, 0}),  //
            1, tcp_frame_with_options(kExternalAddr, first + 2, kPeer, kPeerTcpPort, kSyn, {1, 2, 4, 0x05, 0x50, 1, 1, 0}, 63));
    forward("an MSS option on a segment without SYN is left alone", 0,
            tcp_frame_with_options(kNode, 40010, kInternalAddr, kImportTcpPort, kAck, mss1460),  //
            1, tcp_frame_with_options(kExternalAddr, first + 1, kPeer, kPeerTcpPort, kAck, mss1460, 63));

    // Drops: nothing is rewritten and no session or port is taken.
    drop("TCP ACK with no session", 0, tcp_frame(kNode, 40001, kInternalAddr, kImportTcpPort, kAck),
         DropReason::tcp_no_session);
    drop("TCP SYN-ACK with no session", 1, tcp_frame(kPeer, 45002, kExternalAddr, kExportTcpPort, kSyn | kAck),
         DropReason::tcp_no_session);
    drop("TCP RST with no session", 0, tcp_frame(kNode, 40001, kInternalAddr, kImportTcpPort, kRst),
         DropReason::tcp_no_session);
    drop("import from a source outside the allowed prefixes", 0,
         tcp_frame(kDeniedNode, 40000, kInternalAddr, kImportTcpPort, kSyn), DropReason::map_source_denied);
    drop("export TCP from a peer the rule does not allow", 1,
         tcp_frame(kStranger, 45000, kExternalAddr, kExportTcpPort, kSyn), DropReason::map_peer_denied);
    drop("export UDP from a peer the rule does not allow", 1,
         udp_frame(kStranger, 45000, kExternalAddr, kExportUdpPort), DropReason::map_peer_denied);
    drop("TTL 1 on a packet that would open a session", 0,
         tcp_frame(kNode, 40002, kInternalAddr, kImportTcpPort, kSyn, 1000, 0, 1), DropReason::ttl_expired);
    drop("TTL 1 on a packet of an existing session", 0,
         tcp_frame(kNode, 40000, kInternalAddr, kImportTcpPort, kAck, 1101, 0, 1), DropReason::ttl_expired);
    drop("TTL 1 on a reply of an existing session", 1,
         udp_frame(kPeer, kPeerUdpPort, kExternalAddr, first, 8, 1), DropReason::ttl_expired);
    drop("TTL 1 on an ICMP error about a session's packet", 1,
         icmp_error_frame(kPeer, kExternalAddr, 3, 3, l3_of(syn_as_sent), 1), DropReason::ttl_expired);

    // Not the NAT's: left to the caller untouched.
    not_nat("TCP to the internal address on a port with no rule", 0,
            tcp_frame(kNode, 40000, kInternalAddr, 9999, kSyn));
    not_nat("UDP to a port that only has a TCP import", 0, udp_frame(kNode, 41000, kInternalAddr, kImportTcpPort));
    not_nat("to the external address, arriving on the internal port", 0,
            tcp_frame(kNode, 40003, kExternalAddr, kExportTcpPort, kSyn));
    not_nat("to the internal address, arriving on the external port", 1,
            tcp_frame(kPeer, 45003, kInternalAddr, kImportTcpPort, kSyn));
    not_nat("to an import port on the external address (imports live on internal ports)", 1,
            tcp_frame(kPeer, 45003, kExternalAddr, kImportTcpPort, kSyn));
    not_nat("to an export port on the internal address (exports live on the external port)", 0,
            tcp_frame(kNode, 40004, kInternalAddr, kExportTcpPort, kSyn));
    not_nat("transit traffic not addressed to the gateway", 0, tcp_frame(kNode, 40005, kPeer, kPeerTcpPort, kSyn));
    not_nat("a reply to an allocated port no session holds", 1,
            udp_frame(kPeer, kPeerUdpPort, kExternalAddr, first + 2));
    not_nat("an ICMP error about a packet no session sent", 1,
            icmp_error_frame(kPeer, kExternalAddr, 3, 3,
                             l3_of(tcp_frame(kExternalAddr, first + 50, kPeer, kPeerTcpPort, kSyn, 1000, 0, 63))));
    not_nat("an ICMP error quoting too little to hold the ports", 1,
            icmp_error_frame(kPeer, kExternalAddr, 3, 3, l3_of(syn_as_sent, 24)));
    return cases;
}

}  // namespace fedgate::test
