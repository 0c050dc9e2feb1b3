// Port bring-up through rte_dev_probe and the ethdev API.
#include "drivers/port.hpp"

#include <dirent.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "dataplane/idle.hpp"

#ifndef AF_XDP
#define AF_XDP 44
#endif

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

// ---- af_xdp: what the kernel and the interface must offer, checked before DPDK tries, because
// the PMD's own failures reach us only as "cannot attach" with the reason in the EAL log.

constexpr unsigned kAfXdpFillMbufs = 2048;  // the PMD's ETH_AF_XDP_DFLT_NUM_DESCS

bool is_af_xdp(const std::string& device) { return device.rfind("net_af_xdp", 0) == 0; }
bool is_af_packet(const std::string& device) { return device.rfind("net_af_packet", 0) == 0; }

// The value of `key` in vdev devargs "name,k=v,k=v"; empty if absent.
std::string devarg(const std::string& device, const std::string& key) {
    size_t at = device.find(',');
    while (at != std::string::npos) {
        const size_t next = device.find(',', at + 1);
        const std::string kv = device.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
        if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
        at = next;
    }
    return {};
}

// The largest frame an af_xdp queue takes into one of `pool`'s mbufs: the PMD lays the umem over
// the pool's objects, and the kernel writes a frame after the object header, the mbuf, its
// headroom and XDP's own 256-byte headroom. Longer frames are dropped by the kernel.
uint32_t af_xdp_max_frame(const rte_mempool* pool) {
    const uint32_t obj = rte_mempool_calc_obj_size(pool->elt_size, pool->flags, nullptr);
    const uint32_t before = pool->header_size + sizeof(rte_mbuf) + rte_pktmbuf_priv_size(const_cast<rte_mempool*>(pool)) +
                            RTE_PKTMBUF_HEADROOM + 256;
    return obj > before ? obj - before : 0;
}

void check_af_xdp(const PortSetup& s, const rte_mempool* pool, uint16_t queues) {
    const std::string iface = devarg(s.device, "iface");
    if (iface.empty()) fail(s, "af_xdp needs iface=<interface> in its devargs", EINVAL);
    if (if_nametoindex(iface.c_str()) == 0)
        fail(s, "af_xdp: no interface '" + iface + "' in this network namespace", ENODEV);
    const int fd = ::socket(AF_XDP, SOCK_RAW, 0);
    if (fd < 0) {
        const int err = errno;
        if (err == EAFNOSUPPORT)
            fail(s, "af_xdp on '" + iface + "': this kernel has no XDP sockets (CONFIG_XDP_SOCKETS)", err);
        fail(s, "af_xdp on '" + iface + "': cannot open an XDP socket (needs CAP_NET_RAW and CAP_BPF or root)", err);
    }
    ::close(fd);
    // The fill ring is filled with this many of the pool's mbufs when the queue is set up.
    if (const unsigned free = rte_mempool_avail_count(pool); free < kAfXdpFillMbufs * queues)
        fail(s, "af_xdp on '" + iface + "': its fill ring takes " + std::to_string(kAfXdpFillMbufs) + " mbufs per queue (" +
                    std::to_string(queues) + " queue(s)) and the pool has " +
                    std::to_string(free) + " free (raise [dataplane] mbufs)",
             ENOBUFS);
    // The MTU by ioctl, not sysfs: /sys may show another network namespace.
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
    const int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const bool have_mtu = sock >= 0 && ::ioctl(sock, SIOCGIFMTU, &ifr) == 0;
    if (sock >= 0) ::close(sock);
    const uint32_t mtu = have_mtu ? static_cast<uint32_t>(ifr.ifr_mtu) : 0;
    const uint32_t max_frame = af_xdp_max_frame(pool);
    if (have_mtu && mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN > max_frame)
        fail(s, "af_xdp on '" + iface + "': its MTU " + std::to_string(mtu) + " is too large; an af_xdp port carries frames of at most " +
                    std::to_string(max_frame) + " bytes with these mbufs (set the MTU to " +
                    std::to_string(max_frame - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN) + " or less)",
             EINVAL);
}

// After a failed af_xdp attach: the likely causes, since the PMD logs its reason but returns -1.
[[noreturn]] void fail_af_xdp_attach(const PortSetup& s, int rc) {
    const std::string iface = devarg(s.device, "iface");
    fail(s, "cannot attach af_xdp to '" + iface + "' (see the pmd.net.af_xdp lines above; usual causes: another XDP program "
            "is attached to '" + iface + "' (ip link set dev " + iface + " xdp off), a veth whose peer's MTU is over "
            "about 3500 bytes, or more queues (queue_count=, one per worker) than the interface has combined channels "
            "(ethtool -l; a veth has none, so one)",
         rc);
}

// ---- wake sources: what turns readable when an RX queue gets a packet, for idle lcores.

// The socket descriptors of this process in `domain`, ascending.
std::vector<int> sockets_of(int domain) {
    std::vector<int> out;
    DIR* d = ::opendir("/proc/self/fd");
    if (d == nullptr) return out;
    while (const dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == ::dirfd(d)) continue;
        int dom = 0;
        socklen_t len = sizeof dom;
        if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &dom, &len) == 0 && dom == domain)
            out.push_back(static_cast<int>(fd));
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

// The ifindex an AF_PACKET socket is bound to (0 if none).
int packet_socket_ifindex(int fd) {
    sockaddr_ll sll{};
    socklen_t len = sizeof sll;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sll), &len) != 0) return 0;
    return sll.sll_ifindex;
}

// The sockets the af_packet / af_xdp PMD opened for this port, one per queue pair in the order it
// opened them (DPDK 22.11 offers no rx interrupts for either, but poll() on the socket says when
// the queue holds packets). `before`: the process's AF_XDP sockets before the queues were set up.
void record_socket_wake_sources(const PortSetup& s, const PortHandle& h, const rte_eth_dev_info& info,
                                const std::vector<int>& xdp_before, uint16_t queues) {
    std::vector<int> fds;
    if (is_af_xdp(s.device)) {
        for (const int fd : sockets_of(AF_XDP))
            if (!std::binary_search(xdp_before.begin(), xdp_before.end(), fd)) fds.push_back(fd);
    } else if (is_af_packet(s.device) && info.if_index != 0) {
        for (const int fd : sockets_of(AF_PACKET))
            if (packet_socket_ifindex(fd) == static_cast<int>(info.if_index)) fds.push_back(fd);
    }
    // Anything but one socket per queue, and we cannot tell which is whose: leave the lcore to nap.
    if (fds.size() != queues) return;
    for (uint16_t q = 0; q < queues; ++q) record_rx_wake_source(h.port_id, q, RxWakeSource{fds[q], false});
}

// Rx interrupts, of the vdevs here only net_tap's in DPDK 22.11 (af_packet, af_xdp, pcap, ring
// and null have none; the sockets above stand in for af_packet's and af_xdp's). PCI NICs with
// vfio-pci have them too, but a NIC without MSI-X vectors refuses to start with them asked for,
// and no NIC here to try: they nap.
bool wants_rx_interrupts(const std::string& driver) { return driver == "net_tap"; }

void record_interrupt_wake_sources(const PortHandle& h, uint16_t queues) {
    for (uint16_t q = 0; q < queues; ++q) {
        const int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(h.port_id, q);
        if (fd < 0) return;
        record_rx_wake_source(h.port_id, q, RxWakeSource{fd, true});
    }
}

}  // namespace

PortHandle bring_up_port(const PortSetup& s, rte_mempool* pool) {
    PortHandle h;
    h.queues = s.queues == 0 ? 1 : s.queues;
    if (is_af_xdp(s.device)) check_af_xdp(s, pool, h.queues);
    const std::vector<int> xdp_before = is_af_xdp(s.device) ? sockets_of(AF_XDP) : std::vector<int>{};
    if (!find_port(s.device, &h.port_id)) {
        const std::string devargs = devargs_for_queues(s.device, h.queues);
        if (const int rc = rte_dev_probe(devargs.c_str()); rc < 0 && rc != -EEXIST) {
            if (is_af_xdp(s.device)) fail_af_xdp_attach(s, rc);
            fail(s, "cannot attach", rc);
        }
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
    // Checksums: verdicts on receive wherever the device checks the IPv4 header; on send, the
    // gateway's own UDP datagrams (resolution, peer messages) leave their sums to the device when
    // it does both the IPv4 header and UDP. Translated packets keep their incremental updates,
    // which cost less than preparing an offload. Not on receive for net_tap: its "offload" is the
    // same software check in the driver, and with it on (DPDK 22.11) a non-IP frame the kernel
    // wrote to the tap never reached rx_burst in our wake-source test.
    if ((info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) && h.driver != "net_tap") {
        conf.rxmode.offloads |= info.rx_offload_capa & (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM |
                                                        RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
        h.rx_cksum = true;
    }
    constexpr uint64_t kTxCksum = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
    if ((info.tx_offload_capa & kTxCksum) == kTxCksum) {
        conf.txmode.offloads |= kTxCksum;
        h.tx_cksum = true;
    }
    // RSS where the device hashes flows; elsewhere the data plane steers in software (hand-off).
    const uint64_t rss_hf = info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP);
    if (h.queues > 1 && rss_hf != 0) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        h.rss = true;
    }
    conf.intr_conf.rxq = wants_rx_interrupts(h.driver) ? 1 : 0;
    try {
        if (const int rc = rte_eth_dev_configure(h.port_id, h.queues, h.queues, &conf); rc != 0)
            fail(s, "cannot configure", rc);
        uint16_t rxd = s.rx_desc, txd = s.tx_desc;
        if (const int rc = rte_eth_dev_adjust_nb_rx_tx_desc(h.port_id, &rxd, &txd); rc != 0)
            fail(s, "cannot size the descriptor rings", rc);
        const int socket = rte_eth_dev_socket_id(h.port_id);
        const unsigned sock = socket < 0 ? 0 : static_cast<unsigned>(socket);
        for (uint16_t q = 0; q < h.queues; ++q) {
            if (const int rc = rte_eth_rx_queue_setup(h.port_id, q, rxd, sock, nullptr, pool); rc != 0) {
                if (is_af_xdp(s.device)) fail_af_xdp_attach(s, rc);  // the XDP socket and program come here
                fail(s, "cannot set up RX queue " + std::to_string(q), rc);
            }
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
        if (conf.intr_conf.rxq != 0)
            record_interrupt_wake_sources(h, h.queues);
        else
            record_socket_wake_sources(s, h, info, xdp_before, h.queues);
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
    forget_rx_wake_sources(h.port_id);
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
