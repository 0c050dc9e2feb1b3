// A test double of libibverbs for the verbs backend (drivers/verbs_api.hpp): configurable devices,
// ports and GID tables, and QPs that behave like an RC HCA where the backend could get it wrong.
//
// - modify_qp enforces the RC state machine and attribute masks as the kernel's ib_modify_qp_is_ok
//   table does: each transition has required and optional bits; a missing required bit, any other
//   bit or any other transition gives EINVAL. Values are checked too (port exists, RoCE address
//   vectors are global with a non-zero dgid and an existing sgid_index, path_mtu not above the
//   port's active MTU, PSNs and QPNs within 24 bits).
// - post_send works only in RTS (EINVAL otherwise; flushed in ERR), post_recv from INIT on, and the
//   send queue holds max_send_wr WRs until a later signaled completion is polled.
// - QPs in one FakeVerbs are linked by dest_qp_num: RDMA WRITE copies into the peer's MR after
//   checking rkey, access and bounds (else IBV_WC_REM_ACCESS_ERR); SEND fills the peer's next posted
//   receive. A SEND that finds no receive fails at once with IBV_WC_RNR_RETRY_EXC_ERR rather than
//   retrying, so a flow-control bug fails a test instead of stalling it. A failed WR moves its QP to
//   ERR, and later WRs are flushed (IBV_WC_WR_FLUSH_ERR), as on hardware.
// Thread-safe (one lock), so two connections can run in two threads of one test.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "drivers/verbs.hpp"
#include "drivers/verbs_api.hpp"

namespace fedgate::testing {

struct FakePort {
    ibv_port_state state = IBV_PORT_ACTIVE;
    ibv_mtu active_mtu = IBV_MTU_1024;
    std::vector<GidEntry> gids;
};

struct FakeDevice {
    std::string name;
    std::vector<FakePort> ports;  // port N is ports[N - 1]
};

// GID table rows for tests.
GidEntry roce_v2_ipv4(uint32_t index, uint32_t ipv4);  // ::ffff:a.b.c.d, RoCE v2
GidEntry gid_row(uint32_t index, GidEntry::Type type, std::array<uint8_t, 16> gid);
std::array<uint8_t, 16> link_local_gid(uint8_t last);  // fe80::last
uint32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d);  // host order

// One active port with a link-local and an IPv4-mapped RoCE v2 GID (index 1: 198.18.0.1).
FakeDevice default_fake_device(std::string name = "fake0");

class FakeVerbs final : public VerbsApi {
public:
    explicit FakeVerbs(std::vector<FakeDevice> devices);
    ~FakeVerbs() override;

    ibv_device** get_device_list(int* num_devices) override;
    void free_device_list(ibv_device** list) override;
    const char* get_device_name(ibv_device* device) override;
    ibv_context* open_device(ibv_device* device) override;
    int close_device(ibv_context* context) override;
    int query_device(ibv_context* context, ibv_device_attr* attr) override;
    int query_port(ibv_context* context, uint8_t port, ibv_port_attr* attr) override;
    ssize_t query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries) override;
    ibv_pd* alloc_pd(ibv_context* context) override;
    int dealloc_pd(ibv_pd* pd) override;
    ibv_cq* create_cq(ibv_context* context, int cqe) override;
    int destroy_cq(ibv_cq* cq) override;
    ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) override;
    int destroy_qp(ibv_qp* qp) override;
    int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) override;
    ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, int access) override;
    int dereg_mr(ibv_mr* mr) override;
    int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) override;
    int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
    int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) override;

    // For assertions.
    ibv_qp_state qp_state(uint32_t qpn) const;     // IBV_QPS_UNKNOWN for no such QP
    ibv_qp_attr qp_attr(uint32_t qpn) const;       // everything the QP has been given
    std::string last_error() const;                // why the last call was refused
    std::size_t live_objects() const;              // contexts + PDs + CQs + QPs + MRs not yet freed
    uint64_t sends_delivered() const;              // SENDs that reached a receive

private:
    struct Dev;
    struct Ctx;
    struct Pd;
    struct Cq;
    struct Qp;
    struct Mr;
    struct Recv {
        uint64_t wr_id;
        ibv_sge sge;
    };

    int refuse(int err, std::string why);
    int modify_locked(Qp& q, const ibv_qp_attr& a, int mask);
    bool check_values(Qp& q, ibv_qp_state to, const ibv_qp_attr& a, int mask);
    const Mr* local_mr(const ibv_sge& sge, bool needs_write) const;
    ibv_wc_status execute(Qp& q, const ibv_send_wr& wr, Qp*& peer_failed);
    ibv_wc_status deliver_send(Qp& peer, const ibv_send_wr& wr, uint32_t length);
    void complete(Cq& cq, const ibv_wc& wc, uint32_t covered_wrs);
    Qp* find_qp(uint32_t qpn) const;
    Qp* qp_of(const ibv_qp* qp) const;

    mutable std::mutex mu_;
    std::vector<std::unique_ptr<Dev>> devices_;
    std::map<const void*, std::unique_ptr<Ctx>> contexts_;
    std::map<const void*, std::unique_ptr<Pd>> pds_;
    std::map<const void*, std::unique_ptr<Cq>> cqs_;
    std::map<const void*, std::unique_ptr<Qp>> qps_;
    std::map<const void*, std::unique_ptr<Mr>> mrs_;
    uint32_t next_qpn_ = 0x11;
    uint32_t next_key_ = 0x100;
    uint64_t sends_delivered_ = 0;
    std::string last_error_;
};

}  // namespace fedgate::testing
