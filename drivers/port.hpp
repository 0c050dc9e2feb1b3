// Port bring-up: every kind of device (net_tap, net_af_packet, net_pcap, net_ring, net_null vdevs
// and PCI NICs) is attached, configured and started through this one path.
#pragma once

#include <rte_ether.h>

#include <cstdint>
#include <stdexcept>
#include <string>

struct rte_mempool;

namespace fedgate {

class PortError : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct PortSetup {
    std::string name;    // the gateway's name for the port, for messages
    std::string device;  // vdev devargs ("net_af_packet0,iface=eth1") or PCI address ("0000:03:00.0")
    uint16_t rx_desc = 1024;
    uint16_t tx_desc = 1024;
    // RX/TX queue pairs, one per data-plane worker. Above 1, RSS spreads flows over the RX queues
    // where the device can; net_af_packet/net_af_xdp devargs without qpairs=/queue_count= get it.
    uint16_t queues = 1;
};

struct PortHandle {
    uint16_t port_id = 0;
    rte_ether_addr mac{};
    std::string driver;
    bool attached_here = false;  // we probed it (and so detach it on close)
    uint16_t queues = 1;
    bool rss = false;  // the device spreads flows over the RX queues by an RSS hash (queues > 1)
    // Checksum offloads turned on where the device has them: the IPv4 header (and TCP/UDP) checked
    // on receive, with the verdict in each mbuf; IPv4 header and UDP checksums filled in on send.
    bool rx_cksum = false;
    bool tx_cksum = false;
};

struct LinkState {
    bool up = false;
    uint32_t speed_mbps = 0;
    bool full_duplex = false;
};

// Attaches the device if the EAL has not already, then configures `queues` RX and TX queues on
// `pool` (RSS over the RX queues where the device has it) and starts it. Throws PortError naming the port, the device and the cause.
PortHandle bring_up_port(const PortSetup& setup, rte_mempool* pool);
// Stops and closes the port and detaches a device we attached. Safe to call on any handle once.
void close_port(const PortHandle& port);
LinkState link_state(uint16_t port_id);

}  // namespace fedgate
