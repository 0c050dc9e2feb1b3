// Port bring-up through rte_dev_probe and the ethdev API.
#include "drivers/port.hpp"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace fedgate {
namespace {

[[noreturn]] void fail(const PortSetup& s, const std::string& what, int err) {
    throw PortError("port '" + s.name + "' (device '" + s.device + "'): " + what + ": " + rte_strerror(err < 0 ? -err : err));
}

// The ethdev created for devargs: a vdev's port is named after the device ("net_tap0"); a PCI
// port after its address, which the iterator matches in any spelling the bus accepts.
bool find_port(const std::string& device, uint16_t* port_id) {
    const std::string name = device.substr(0, device.find(','));
    if (rte_eth_dev_get_port_by_name(name.c_str(), port_id) == 0) return true;
    rte_dev_iterator it;
    if (rte_eth_iterator_init(&it, name.c_str()) != 0) return false;
    const uint16_t id = rte_eth_iterator_next(&it);
    rte_eth_iterator_cleanup(&it);
    if (id == RTE_MAX_ETHPORTS) return false;
    *port_id = id;
    return true;
}

// Socket-backed vdevs make their queues at attach time, from a devargs key: ask for one per worker
// unless the operator already said how many.
std::string devargs_for_queues(const std::string& device, uint16_t queues) {
    if (queues <= 1) return device;
    const std::string driver = device.substr(0, device.find(','));
    const char* key = driver.starts_with("net_af_packet") ? "qpairs"
                      : driver.starts_with("net_af_xdp")  ? "queue_count"
                                                          : nullptr;
    if (key == nullptr || device.find(std::string(",") + key + "=") != std::string::npos) return device;
    return device + "," + key + "=" + std::to_string(queues);
}

}  // namespace

PortHandle bring_up_port(const PortSetup& s, rte_mempool* pool) {
    PortHandle h;
    h.queues = s.queues == 0 ? 1 : s.queues;
    if (!find_port(s.device, &h.port_id)) {
        const std::string devargs = devargs_for_queues(s.device, h.queues);
        if (const int rc = rte_dev_probe(devargs.c_str()); rc < 0 && rc != -EEXIST) fail(s, "cannot attach", rc);
        if (!find_port(s.device, &h.port_id)) fail(s, "attached, but no ethdev port appeared", ENODEV);
        h.attached_here = true;
    }

    rte_eth_dev_info info{};
    if (const int rc = rte_eth_dev_info_get(h.port_id, &info); rc != 0) fail(s, "cannot read device info", rc);
    h.driver = info.driver_name != nullptr ? info.driver_name : "?";

    if (info.max_rx_queues < h.queues || info.max_tx_queues < h.queues) {
        if (h.attached_here) close_port(h);
        fail(s,
             "has " + std::to_string(std::min(info.max_rx_queues, info.max_tx_queues)) + " queue pair(s), " +
                 std::to_string(h.queues) + " workers need one each (a vdev's devargs set how many: qpairs= for " +
                 "net_af_packet, queue_count= for net_af_xdp, several rx_pcap= for net_pcap)",
             EINVAL);
    }

    rte_eth_conf conf{};
    if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE)
        conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
    // RSS where the device hashes flows; elsewhere the data plane steers in software (hand-off).
    const uint64_t rss_hf = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP);
    if (h.queues > 1 && rss_hf != 0) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        h.rss = true;
    }
    try {
        if (const int rc = rte_eth_dev_configure(h.port_id, h.queues, h.queues, &conf); rc != 0)
            fail(s, "cannot configure", rc);
        uint16_t rxd = s.rx_desc, txd = s.tx_desc;
        if (const int rc = rte_eth_dev_adjust_nb_rx_tx_desc(h.port_id, &rxd, &txd); rc != 0)
            fail(s, "cannot size the descriptor rings", rc);
        const int socket = rte_eth_dev_socket_id(h.port_id);
        const unsigned sock = socket < 0 ? 0 : static_cast<unsigned>(socket);
        for (uint16_t q = 0; q < h.queues; ++q) {
            if (const int rc = rte_eth_rx_queue_setup(h.port_id, q, rxd, sock, nullptr, pool); rc != 0)
                fail(s, "cannot set up RX queue " + std::to_string(q), rc);
            if (const int rc = rte_eth_tx_queue_setup(h.port_id, q, txd, sock, nullptr); rc != 0)
                fail(s, "cannot set up TX queue " + std::to_string(q), rc);
        }
        if (const int rc = rte_eth_macaddr_get(h.port_id, &h.mac); rc != 0) fail(s, "cannot read the MAC", rc);
        if (rte_is_zero_ether_addr(&h.mac)) {
            // Some vdevs (net_ring) have no MAC; a port that answers ARP needs one. Locally
            // administered and random, as Linux gives a veth.
            rte_eth_random_addr(h.mac.addr_bytes);
            rte_eth_dev_default_mac_addr_set(h.port_id, &h.mac);
        }
        if (const int rc = rte_eth_dev_start(h.port_id); rc != 0) fail(s, "cannot start", rc);
    } catch (...) {
        close_port(h);
        throw;
    }
    return h;
}

void close_port(const PortHandle& h) {
    if (!rte_eth_dev_is_valid_port(h.port_id)) return;
    rte_eth_dev_info info{};
    rte_device* dev = rte_eth_dev_info_get(h.port_id, &info) == 0 ? info.device : nullptr;
    rte_eth_dev_stop(h.port_id);
    rte_eth_dev_close(h.port_id);
    if (h.attached_here && dev != nullptr) rte_dev_remove(dev);
}

LinkState link_state(uint16_t port_id) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port_id, &link) != 0) return {};
    return {link.link_status == RTE_ETH_LINK_UP,
            link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0u : link.link_speed,
            link.link_duplex == RTE_ETH_LINK_FULL_DUPLEX};
}

}  // namespace fedgate
