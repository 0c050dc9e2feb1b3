// Why the data plane dropped a packet: one enum, one name and one line of help per reason.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace fedgate {

// X(name, help). Names are stable: they appear in `fedgatectl stats` and its JSON.
#define FEDGATE_DROP_REASONS(X)                                                          \
    X(eth_truncated, "frame shorter than an Ethernet header")                            \
    X(vlan_truncated, "VLAN tag cut short")                                              \
    X(vlan_unsupported, "VLAN-tagged frame on an untagged port")                         \
    X(l2_not_for_us, "destination MAC is neither the port's nor broadcast")              \
    X(l2_bad_source, "source MAC is multicast, broadcast or zero")                       \
    X(ethertype_unsupported, "EtherType the gateway does not handle (IPv6, LLDP, ...)")  \
    X(arp_malformed, "ARP that is not Ethernet/IPv4 or is cut short")                    \
    X(arp_unsupported_op, "ARP operation other than request or reply")                   \
    X(arp_not_for_us, "ARP for an address the port does not own")                       \
    X(arp_bad_sender, "ARP sender outside the port's subnet or with a bad MAC")          \
    X(ipv4_truncated, "IPv4 header cut short")                                           \
    X(ipv4_bad_version, "IP version field is not 4")                                     \
    X(ipv4_bad_ihl, "IPv4 header length below 20 bytes")                                 \
    X(ipv4_bad_length, "IPv4 total length disagrees with the frame")                     \
    X(ipv4_bad_checksum, "IPv4 header checksum wrong")                                   \
    X(ipv4_bad_source, "IPv4 source is broadcast, multicast, zero or our own")           \
    X(ipv4_fragment, "IPv4 fragment (the gateway does not reassemble)")                  \
    X(ipv4_not_for_us, "IPv4 to an address the gateway neither owns nor maps")           \
    X(ipv4_proto_unhandled, "IP protocol the gateway does not handle")                   \
    X(icmp_truncated, "ICMP header cut short")                                           \
    X(icmp_bad_checksum, "ICMP checksum wrong")                                          \
    X(icmp_unhandled, "ICMP type the gateway does not answer")                           \
    X(udp_truncated, "UDP header cut short")                                             \
    X(udp_bad_length, "UDP length disagrees with the IPv4 payload")                      \
    X(tcp_truncated, "TCP header cut short")                                             \
    X(tcp_bad_header, "TCP data offset below 20 bytes or past the payload")              \
    X(l4_unhandled, "TCP/UDP to a gateway address on a port nothing serves")             \
    X(ttl_expired, "TTL ran out on a packet the gateway would forward")                  \
    X(map_source_denied, "source not allowed by the import mapping, or not behind its port")          \
    X(map_peer_denied, "sender is not a peer the export mapping allows")                 \
    X(map_bad_target, "mapping's target address is zero, broadcast, multicast or ours: replies could not come from it") \
    X(tcp_no_session, "TCP segment other than a SYN, with no session")                    \
    X(session_wrong_port, "packet of a session arrived on the wrong gateway port")        \
    X(session_table_full, "new session refused: session table full")                     \
    X(nat_ports_exhausted, "new session refused: no free NAT port")                      \
    X(no_route, "no port reaches the destination")                                       \
    X(neighbour_unresolved, "next hop unresolved: ARP unanswered or hold slot taken")    \
    X(neighbour_table_full, "neighbour table full")                                      \
    X(tx_full, "port TX queue full")                                                     \
    X(punt_ring_full, "ring to the control threads full")                                \
    X(handoff_ring_full, "another worker's hand-off ring full")                          \
    X(inject_malformed, "packet from the control threads is not valid IPv4")            \
    X(resolve_malformed, "resolution message that does not parse (magic, version, type, length)") \
    X(resolve_wrong_port, "resolution message on the wrong side (client on external, peer on internal)") \
    X(resolve_unknown_peer, "peer message from an address or party that is not a configured peer") \
    X(resolve_peer_rate_limited, "peer message over [resolve] peer_verify_rate, MAC not checked") \
    X(resolve_unknown_key, "peer message under a key ID the peer has no key for here")   \
    X(resolve_bad_mac, "peer message whose HMAC does not verify")                         \
    X(resolve_replayed, "peer message seen before, or too old for the replay window")     \
    X(resolve_clock_skew, "peer message stamped too far in the past or future")            \
    X(resolve_unexpected, "resolution message of a type the gateway never receives")       \
    X(resolve_alloc_failed, "no mbuf to answer a resolution message with")              \
    X(roce_malformed, "RoCE v2 packet too short for BTH and ICRC, with IPv4 options, or too long") \
    X(roce_opcode_unsupported, "RoCE v2 opcode that is not RC or CNP (UD, RD, UC, reserved)") \
    X(roce_no_translation, "RoCE v2 to a queue pair no established connection uses")     \
    X(roce_not_peer, "RoCE v2 on the external side from another than the connection's peer gateway") \
    X(roce_wrong_source, "RoCE v2 on the internal side from another than the connection's node") \
    X(cluster_standby, "standby member of a gateway group: it sends nothing and takes no IPv4")

enum class DropReason : uint8_t {
#define FEDGATE_X(name, help) name,
    FEDGATE_DROP_REASONS(FEDGATE_X)
#undef FEDGATE_X
    count,
    none = count,  // "not dropped": what the parser returns for a good packet
};

inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::count);

inline constexpr std::array<std::string_view, kDropReasonCount> kDropReasonNames = {
#define FEDGATE_X(name, help) #name,
    FEDGATE_DROP_REASONS(FEDGATE_X)
#undef FEDGATE_X
};

inline constexpr std::array<std::string_view, kDropReasonCount> kDropReasonHelp = {
#define FEDGATE_X(name, help) help,
    FEDGATE_DROP_REASONS(FEDGATE_X)
#undef FEDGATE_X
};

constexpr std::string_view drop_reason_name(DropReason r) {
    return r == DropReason::none ? std::string_view{"none"} : kDropReasonNames[static_cast<std::size_t>(r)];
}

}  // namespace fedgate
