// Small helpers the compute-node side (node client, endpoint, tcp backend) shares for its sockets.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <span>

namespace fedgate {

// An IPv4 socket address from a host-order address and port.
inline sockaddr_in sockaddr_of(uint32_t ipv4, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ipv4);
    a.sin_port = htons(port);
    return a;
}

// The bytes of a packed wire struct.
template <typename T>
std::span<const uint8_t> bytes_of(const T& v) {
    return {reinterpret_cast<const uint8_t*>(&v), sizeof v};
}

}  // namespace fedgate
