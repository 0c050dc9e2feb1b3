// Capture under a real EAL: the tcpdump filter as an rte_bpf program (converted from libpcap's classic
// BPF) accepts and rejects the same frames libpcap does, JIT-compiled and interpreted, whole and split
// over segments; a capture on a net_ring port writes pcapng with each packet's interface and
// direction.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "controlplane/capture.hpp"
#include "controlplane/mgmt_server.hpp"
#include "drivers/port.hpp"
#include "tests/support/packet_builder.hpp"

namespace fedgate {
namespace {

using test::PacketBuilder;
using Frame = std::vector<uint8_t>;

const test::Mac kNode{0x02, 0x00, 0x00, 0x00, 0x01, 0x0a};
const test::Mac kGw{0x02, 0x00, 0x00, 0x00, 0x01, 0x01};

rte_mempool* pool() {
    static rte_mempool* p = rte_pktmbuf_pool_create("cap_test_mbufs", 511, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    return p;
}

// The frame in one mbuf, or split after `split` bytes into two chained segments.
rte_mbuf* mbuf_of(const Frame& f, std::size_t split = 0) {
    rte_mbuf* head = rte_pktmbuf_alloc(pool());
    const std::size_t first = split == 0 ? f.size() : split;
    std::memcpy(rte_pktmbuf_append(head, static_cast<uint16_t>(first)), f.data(), first);
    if (split != 0) {
        rte_mbuf* tail = rte_pktmbuf_alloc(pool());
        std::memcpy(rte_pktmbuf_append(tail, static_cast<uint16_t>(f.size() - first)), f.data() + first, f.size() - first);
        EXPECT_EQ(rte_pktmbuf_chain(head, tail), 0);
    }
    return head;
}

// What libpcap's own interpreter says of the frame: the reference the converted program must match.
bool libpcap_matches(const std::string& expr, const Frame& f) {
    pcap_t* dead = pcap_open_dead(DLT_EN10MB, 2048);
    bpf_program prog{};
    EXPECT_EQ(pcap_compile(dead, &prog, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN), 0) << expr;
    pcap_pkthdr h{};
    h.caplen = h.len = static_cast<bpf_u_int32>(f.size());
    const bool yes = pcap_offline_filter(&prog, &h, f.data()) != 0;
    pcap_freecode(&prog);
    pcap_close(dead);
    return yes;
}

struct Case {
    const char* what;
    Frame frame;
};

std::vector<Case> frames() {
    return {
        {"echo request", PacketBuilder().eth(kGw, kNode).ipv4("198.18.1.10", "198.18.1.1", 61).icmp(8, 0, 7, 1).payload(56).build()},
        {"echo reply", PacketBuilder().eth(kNode, kGw).ipv4("198.18.1.1", "198.18.1.10").icmp(0, 0, 7, 1).payload(56).build()},
        {"resolution query", PacketBuilder().eth(kGw, kNode).ipv4("198.18.1.10", "198.18.1.1").udp(40000, 7410).payload(40).build()},
        {"tcp syn to 80", PacketBuilder().eth(kGw, kNode).ipv4("198.18.1.10", "198.19.0.9").tcp(33000, 80).build()},
        {"arp request", PacketBuilder().eth(test::kBroadcast, kNode).arp(1, kNode, "198.18.1.10", {}, "198.18.1.1").build()},
        {"tagged udp", PacketBuilder().eth(kGw, kNode).vlan(42).ipv4("198.18.1.10", "198.18.1.1").udp(5000, 7410).build()},
    };
}

const std::vector<std::string> kExpressions = {
    "icmp", "udp port 7410", "arp", "tcp and dst port 80", "vlan 42", "host 198.18.1.10 and not icmp",
    "ip[8] == 61", "ether src 02:00:00:00:01:0a", "greater 100",
    // Indirect loads (past the IP header, whose length is in the packet): rte_bpf_convert gets their
    // index register wrong, which CaptureFilter corrects.
    "icmp[icmptype] == icmp-echoreply", "icmp[icmptype] == icmp-echo", "udp[2:2] == 7410",
    // A flag test with a small constant, which DPDK's x86-64 JIT miscompiles: interpreted instead.
    "tcp[tcpflags] & tcp-syn != 0", "ip[6] & 0x20 = 0", "tcp[13] & 0x12 != 0",
};

bool small_flag_test(const std::string& expr) { return expr.find('&') != std::string::npos; }

TEST(CaptureFilter, ConvertedProgramAgreesWithLibpcapWithAndWithoutJit) {
    const auto cases = frames();
    for (const std::string& expr : kExpressions) {
        CaptureFilter jit(expr, 2048, true), interp(expr, 2048, false);
        EXPECT_FALSE(interp.jit());
#if defined(RTE_ARCH_X86_64)
        EXPECT_EQ(jit.jit(), !small_flag_test(expr)) << "DPDK has a JIT for x86-64: '" << expr << "'";
#endif
        for (const Case& c : cases) {
            const bool want = libpcap_matches(expr, c.frame);
            // Split inside the IP header too: the program reads the frame through the mbuf, not a flat buffer.
            for (const std::size_t split : {std::size_t{0}, std::size_t{20}}) {
                rte_mbuf* m = mbuf_of(c.frame, split);
                EXPECT_EQ(jit.matches(m), want) << "'" << expr << "' JIT on " << c.what << " split " << split;
                EXPECT_EQ(interp.matches(m), want) << "'" << expr << "' interpreted on " << c.what << " split " << split;
                rte_pktmbuf_free(m);
            }
        }
    }
}

TEST(CaptureFilter, IcmpSelectsTheEchoesAndNothingElseInABurst) {
    const auto cases = frames();
    std::vector<rte_mbuf*> burst;
    for (const Case& c : cases) burst.push_back(mbuf_of(c.frame));
    for (const bool use_jit : {true, false}) {
        CaptureFilter f("icmp", 2048, use_jit);
        std::vector<uint64_t> verdict(burst.size());
        f.run(burst.data(), static_cast<uint16_t>(burst.size()), verdict.data());
        std::vector<bool> got;
        for (uint64_t v : verdict) got.push_back(v != 0);
        EXPECT_EQ(got, (std::vector<bool>{true, true, false, false, false, false})) << (use_jit ? "JIT" : "interpreter");
    }
    rte_pktmbuf_free_bulk(burst.data(), static_cast<unsigned>(burst.size()));
}

TEST(CaptureFilter, ABadExpressionIsRefusedWithLibpcapsReason) {
    try {
        CaptureFilter f("icmp and and", 2048);
        FAIL() << "accepted";
    } catch (const MgmtError& e) {
        EXPECT_NE(std::string(e.what()).find("filter 'icmp and and': "), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("syntax error"), std::string::npos) << e.what();
    }
}

// ---- a capture on a net_ring port, read back as pcapng ----

struct Block {
    uint32_t type;
    std::vector<uint8_t> body;  // after type and length, before the trailing length
};

uint32_t u32(const std::vector<uint8_t>& b, std::size_t off) {
    uint32_t v;
    std::memcpy(&v, b.data() + off, 4);
    return v;
}

std::vector<Block> read_pcapng(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> d((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<Block> out;
    for (std::size_t at = 0; at + 12 <= d.size();) {
        const uint32_t len = u32(d, at + 4);
        if (len < 12 || at + len > d.size()) break;
        out.push_back({u32(d, at), std::vector<uint8_t>(d.begin() + static_cast<long>(at) + 8, d.begin() + static_cast<long>(at + len - 4))});
        at += len;
    }
    return out;
}

// An EPB's flags option (code 2): the direction in its low two bits.
uint32_t epb_flags(const Block& b) {
    std::size_t at = 20 + ((u32(b.body, 12) + 3) & ~3u);
    while (at + 4 <= b.body.size()) {
        uint16_t code, len;
        std::memcpy(&code, &b.body[at], 2);
        std::memcpy(&len, &b.body[at + 2], 2);
        if (code == 2 && len == 4) return u32(b.body, at + 4);
        if (code == 0) break;
        at += 4 + ((len + 3u) & ~3u);
    }
    return 0xffffffff;
}

TEST(CaptureService, RingPortCaptureIsPcapngWithInterfaceAndDirectionPerPacket) {
    ASSERT_NE(pool(), nullptr);
    rte_ring* rx = rte_ring_create("capt_rx", 64, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    rte_ring* tx = rte_ring_create("capt_tx", 64, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_GE(rte_eth_from_rings("capt", &rx, 1, &tx, 1, 0), 0);
    const PortHandle port = bring_up_port(PortSetup{"capt", "net_ring_capt"}, pool());
    uint16_t index_in_file = 0;  // rte_pcapng writes one interface block per port, in port order
    for (uint16_t p = 0; p < port.port_id; ++p) index_in_file += rte_eth_dev_is_valid_port(p);

    const auto path = std::filesystem::temp_directory_path() / ("fgcap" + std::to_string(::getpid()) + ".pcapng");
    std::filesystem::remove(path);
    CaptureService capture({{"inside", port.port_id, 1}}, nullptr);  // no lcore: the callbacks run on this thread
    const auto started = capture.handle({{"cmd", "capture_start"}, {"port", "inside"}, {"file", path.string()}, {"filter", "icmp"}});
    EXPECT_EQ(started["format"], "pcapng");

    const auto cases = frames();
    const Frame& request = cases[0].frame;
    const Frame& reply = cases[1].frame;
    const Frame& query = cases[2].frame;
    rte_mbuf* in[2] = {mbuf_of(request), mbuf_of(query)};
    ASSERT_EQ(rte_ring_enqueue_burst(rx, reinterpret_cast<void**>(in), 2, nullptr), 2u);
    rte_mbuf* got[4];
    ASSERT_EQ(rte_eth_rx_burst(port.port_id, 0, got, 4), 2);  // the rx callback sees both, keeps the request
    rte_pktmbuf_free_bulk(got, 2);
    rte_mbuf* out = mbuf_of(reply);
    ASSERT_EQ(rte_eth_tx_burst(port.port_id, 0, &out, 1), 1);  // the tx callback keeps the reply
    void* sent = nullptr;
    ASSERT_EQ(rte_ring_dequeue(tx, &sent), 0);
    rte_pktmbuf_free(static_cast<rte_mbuf*>(sent));

    const auto stopped = capture.handle({{"cmd", "capture_stop"}, {"id", started["id"]}});
    EXPECT_EQ(stopped["seen"], 3);
    EXPECT_EQ(stopped["matched"], 2);
    EXPECT_EQ(stopped["written"], 2);
    EXPECT_EQ(stopped["dropped"], 0);

    const auto blocks = read_pcapng(path.string());
    ASSERT_GE(blocks.size(), 3u);
    EXPECT_EQ(blocks[0].type, 0x0a0d0d0au);  // section header
    EXPECT_EQ(u32(blocks[0].body, 0), 0x1a2b3c4du);
    std::vector<const Block*> packets;
    std::size_t interfaces = 0;
    for (const Block& b : blocks) {
        interfaces += b.type == 1;
        if (b.type == 6) packets.push_back(&b);
    }
    EXPECT_EQ(interfaces, static_cast<std::size_t>(rte_eth_dev_count_avail()));
    ASSERT_EQ(packets.size(), 2u);
    const Frame* want[2] = {&request, &reply};
    for (int i = 0; i < 2; ++i) {
        const Block& b = *packets[i];
        EXPECT_EQ(u32(b.body, 0), index_in_file) << "packet " << i;
        EXPECT_EQ(u32(b.body, 12), want[i]->size());
        EXPECT_EQ(u32(b.body, 16), want[i]->size());
        EXPECT_EQ(Frame(b.body.begin() + 20, b.body.begin() + 20 + static_cast<long>(want[i]->size())), *want[i]);
        EXPECT_EQ(epb_flags(b) & 3, i == 0 ? 1u : 2u) << "inbound, then outbound";
    }
    const uint64_t ns = uint64_t{u32(packets[0]->body, 4)} << 32 | u32(packets[0]->body, 8);
    EXPECT_NEAR(static_cast<double>(ns) / 1e9, static_cast<double>(::time(nullptr)), 60.0) << "a wall-clock timestamp";

    std::filesystem::remove(path);
    close_port(port);
    rte_ring_free(rx);
    rte_ring_free(tx);
}

}  // namespace
}  // namespace fedgate
