// FakeVerbs: see fake_verbs.hpp.
#include "tests/support/fake_verbs.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace fedgate::testing {

struct FakeVerbs::Dev {
    ibv_device dev{};
    FakeDevice cfg;
};
struct FakeVerbs::Ctx {
    ibv_context ctx{};
    Dev* dev = nullptr;
};
struct FakeVerbs::Pd {
    ibv_pd pd{};
};
struct FakeVerbs::Cq {
    ibv_cq cq{};
    struct Entry {
        ibv_wc wc;
        uint32_t covered;  // send-queue WRs this completion retires (0 for receives)
    };
    std::deque<Entry> entries;
    bool overrun = false;
};
struct FakeVerbs::Qp {
    ibv_qp qp{};
    Ctx* ctx = nullptr;
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
    ibv_qp_init_attr init{};
    ibv_qp_attr attr{};
    std::deque<Recv> recvs;
    uint32_t sq_outstanding = 0;  // posted, not yet retired by a polled signaled completion
    uint32_t unsignaled = 0;      // unsignaled WRs since the last signaled one
};
struct FakeVerbs::Mr {
    ibv_mr mr{};
    int access = 0;
};

namespace {

constexpr uint32_t k24Bits = 0xffffff;

struct MaskRule {
    ibv_qp_state from, to;
    int required, optional;
};

// RC rows of the kernel's qp_state_table (drivers/infiniband/core/verbs.c), IBV_QP_STATE implied.
constexpr MaskRule kRcRules[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER},
};

const char* state_name(ibv_qp_state s) {
    switch (s) {
        case IBV_QPS_RESET: return "RESET";
        case IBV_QPS_INIT: return "INIT";
        case IBV_QPS_RTR: return "RTR";
        case IBV_QPS_RTS: return "RTS";
        case IBV_QPS_ERR: return "ERR";
        default: return "other";
    }
}

bool zero_gid(const uint8_t* g) { return std::all_of(g, g + 16, [](uint8_t b) { return b == 0; }); }

}  // namespace

GidEntry gid_row(uint32_t index, GidEntry::Type type, std::array<uint8_t, 16> gid) {
    return GidEntry{index, gid, type, 3};
}

GidEntry roce_v2_ipv4(uint32_t index, uint32_t ip) {
    std::array<uint8_t, 16> g{};
    g[10] = g[11] = 0xff;
    store_be32(g.data() + 12, ip);
    return gid_row(index, GidEntry::Type::roce_v2, g);
}

std::array<uint8_t, 16> link_local_gid(uint8_t last) {
    std::array<uint8_t, 16> g{};
    g[0] = 0xfe;
    g[1] = 0x80;
    g[15] = last;
    return g;
}

uint32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

FakeDevice default_fake_device(std::string name) {
    FakePort port;
    port.gids = {gid_row(0, GidEntry::Type::roce_v2, link_local_gid(1)), roce_v2_ipv4(1, ipv4(198, 18, 0, 1))};
    return FakeDevice{std::move(name), {port}};
}

FakeVerbs::FakeVerbs(std::vector<FakeDevice> devices) {
    for (FakeDevice& d : devices) {
        auto dev = std::make_unique<Dev>();
        std::snprintf(dev->dev.name, sizeof dev->dev.name, "%s", d.name.c_str());
        dev->dev.node_type = IBV_NODE_CA;
        dev->dev.transport_type = IBV_TRANSPORT_IB;
        dev->cfg = std::move(d);
        devices_.push_back(std::move(dev));
    }
}

FakeVerbs::~FakeVerbs() = default;

int FakeVerbs::refuse(int err, std::string why) {
    last_error_ = std::move(why);
    errno = err;
    return err;
}

ibv_device** FakeVerbs::get_device_list(int* n) {
    std::lock_guard lock(mu_);
    auto** list = new ibv_device*[devices_.size() + 1];
    for (size_t i = 0; i < devices_.size(); ++i) list[i] = &devices_[i]->dev;
    list[devices_.size()] = nullptr;
    *n = static_cast<int>(devices_.size());
    return list;
}

void FakeVerbs::free_device_list(ibv_device** list) { delete[] list; }

const char* FakeVerbs::get_device_name(ibv_device* device) {
    std::lock_guard lock(mu_);
    for (auto& d : devices_)
        if (&d->dev == device) return d->cfg.name.c_str();
    return nullptr;
}

ibv_context* FakeVerbs::open_device(ibv_device* device) {
    std::lock_guard lock(mu_);
    for (auto& d : devices_) {
        if (&d->dev != device) continue;
        auto c = std::make_unique<Ctx>();
        c->ctx.device = device;
        c->dev = d.get();
        ibv_context* p = &c->ctx;
        contexts_[p] = std::move(c);
        return p;
    }
    errno = ENODEV;
    return nullptr;
}

int FakeVerbs::close_device(ibv_context* context) {
    std::lock_guard lock(mu_);
    return contexts_.erase(context) ? 0 : refuse(EINVAL, "close_device: unknown context");
}

int FakeVerbs::query_device(ibv_context* context, ibv_device_attr* attr) {
    std::lock_guard lock(mu_);
    const auto it = contexts_.find(context);
    if (it == contexts_.end()) return refuse(EINVAL, "query_device: unknown context");
    *attr = {};
    attr->phys_port_cnt = static_cast<uint8_t>(it->second->dev->cfg.ports.size());
    attr->max_qp_wr = 1024;
    attr->max_cqe = 4096;
    return 0;
}

int FakeVerbs::query_port(ibv_context* context, uint8_t port, ibv_port_attr* attr) {
    std::lock_guard lock(mu_);
    const auto it = contexts_.find(context);
    if (it == contexts_.end()) return refuse(EINVAL, "query_port: unknown context");
    const auto& ports = it->second->dev->cfg.ports;
    if (port == 0 || port > ports.size()) return refuse(EINVAL, "query_port: no port " + std::to_string(port));
    const FakePort& p = ports[port - 1];
    *attr = {};
    attr->state = p.state;
    attr->max_mtu = IBV_MTU_4096;
    attr->active_mtu = p.active_mtu;
    attr->gid_tbl_len = 0;
    for (const GidEntry& g : p.gids) attr->gid_tbl_len = std::max<int>(attr->gid_tbl_len, static_cast<int>(g.index) + 1);
    attr->pkey_tbl_len = 1;
    attr->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

ssize_t FakeVerbs::query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries) {
    std::lock_guard lock(mu_);
    const auto it = contexts_.find(context);
    if (it == contexts_.end()) return -EINVAL;
    size_t n = 0;
    const auto& ports = it->second->dev->cfg.ports;
    for (size_t p = 0; p < ports.size(); ++p) {
        for (const GidEntry& g : ports[p].gids) {
            if (n == max_entries) return -EINVAL;  // as rdma-core: the caller's array is too small
            ibv_gid_entry& e = entries[n++];
            e = {};
            std::memcpy(e.gid.raw, g.gid.data(), 16);
            e.gid_index = g.index;
            e.port_num = static_cast<uint32_t>(p + 1);
            e.gid_type = g.type == GidEntry::Type::ib        ? IBV_GID_TYPE_IB
                         : g.type == GidEntry::Type::roce_v1 ? IBV_GID_TYPE_ROCE_V1
                                                             : IBV_GID_TYPE_ROCE_V2;
            e.ndev_ifindex = g.ifindex;
        }
    }
    return static_cast<ssize_t>(n);
}

ibv_pd* FakeVerbs::alloc_pd(ibv_context* context) {
    std::lock_guard lock(mu_);
    if (!contexts_.count(context)) {
        errno = EINVAL;
        return nullptr;
    }
    auto pd = std::make_unique<Pd>();
    pd->pd.context = context;
    ibv_pd* p = &pd->pd;
    pds_[p] = std::move(pd);
    return p;
}

int FakeVerbs::dealloc_pd(ibv_pd* pd) {
    std::lock_guard lock(mu_);
    for (const auto& [k, mr] : mrs_)
        if (mr->mr.pd == pd) return refuse(EBUSY, "dealloc_pd: memory regions still registered");
    for (const auto& [k, qp] : qps_)
        if (qp->qp.pd == pd) return refuse(EBUSY, "dealloc_pd: QPs still exist");
    return pds_.erase(pd) ? 0 : refuse(EINVAL, "dealloc_pd: unknown PD");
}

ibv_cq* FakeVerbs::create_cq(ibv_context* context, int cqe) {
    std::lock_guard lock(mu_);
    if (!contexts_.count(context) || cqe <= 0) {
        errno = EINVAL;
        return nullptr;
    }
    auto cq = std::make_unique<Cq>();
    cq->cq.context = context;
    cq->cq.cqe = cqe;
    ibv_cq* p = &cq->cq;
    cqs_[p] = std::move(cq);
    return p;
}

int FakeVerbs::destroy_cq(ibv_cq* cq) {
    std::lock_guard lock(mu_);
    for (const auto& [k, qp] : qps_)
        if (qp->qp.send_cq == cq || qp->qp.recv_cq == cq) return refuse(EBUSY, "destroy_cq: a QP still uses it");
    return cqs_.erase(cq) ? 0 : refuse(EINVAL, "destroy_cq: unknown CQ");
}

ibv_qp* FakeVerbs::create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    std::lock_guard lock(mu_);
    const auto pit = pds_.find(pd);
    if (pit == pds_.end() || !cqs_.count(attr->send_cq) || !cqs_.count(attr->recv_cq) || attr->qp_type != IBV_QPT_RC ||
        attr->cap.max_send_wr == 0 || attr->cap.max_recv_wr == 0) {
        refuse(EINVAL, "create_qp: bad PD, CQ, type or capacity");
        return nullptr;
    }
    auto q = std::make_unique<Qp>();
    q->ctx = contexts_.at(pd->context).get();
    q->send_cq = cqs_.at(attr->send_cq).get();
    q->recv_cq = cqs_.at(attr->recv_cq).get();
    q->init = *attr;
    q->qp.context = pd->context;
    q->qp.pd = pd;
    q->qp.send_cq = attr->send_cq;
    q->qp.recv_cq = attr->recv_cq;
    q->qp.qp_num = next_qpn_++;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    ibv_qp* p = &q->qp;
    qps_[p] = std::move(q);
    return p;
}

int FakeVerbs::destroy_qp(ibv_qp* qp) {
    std::lock_guard lock(mu_);
    return qps_.erase(qp) ? 0 : refuse(EINVAL, "destroy_qp: unknown QP");
}

FakeVerbs::Qp* FakeVerbs::qp_of(const ibv_qp* qp) const {
    const auto it = qps_.find(qp);
    return it == qps_.end() ? nullptr : it->second.get();
}

FakeVerbs::Qp* FakeVerbs::find_qp(uint32_t qpn) const {
    for (const auto& [k, q] : qps_)
        if (q->qp.qp_num == qpn) return q.get();
    return nullptr;
}

int FakeVerbs::modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    std::lock_guard lock(mu_);
    Qp* q = qp_of(qp);
    if (q == nullptr) return refuse(EINVAL, "modify_qp: unknown QP");
    return modify_locked(*q, *attr, mask);
}

int FakeVerbs::modify_locked(Qp& q, const ibv_qp_attr& a, int mask) {
    if (!(mask & IBV_QP_STATE)) return refuse(EINVAL, "modify_qp without IBV_QP_STATE");
    const ibv_qp_state from = q.qp.state, to = a.qp_state;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        if (mask != IBV_QP_STATE) return refuse(EINVAL, std::string("modify_qp to ") + state_name(to) + " takes only IBV_QP_STATE");
    } else {
        const MaskRule* rule = nullptr;
        for (const MaskRule& r : kRcRules)
            if (r.from == from && r.to == to) rule = &r;
        if (rule == nullptr)
            return refuse(EINVAL, std::string("modify_qp: no transition ") + state_name(from) + "->" + state_name(to));
        const int rest = mask & ~IBV_QP_STATE;
        if ((rest & rule->required) != rule->required)
            return refuse(EINVAL, std::string("modify_qp ") + state_name(from) + "->" + state_name(to) +
                                      ": required attribute bits missing: 0x" + std::to_string(rule->required & ~rest));
        if (rest & ~(rule->required | rule->optional))
            return refuse(EINVAL, std::string("modify_qp ") + state_name(from) + "->" + state_name(to) +
                                      ": attribute bits not allowed here: " + std::to_string(rest & ~(rule->required | rule->optional)));
        if (!check_values(q, to, a, mask)) return EINVAL;
    }
    // Keep what this call set, as the HCA does; a later query would return it.
    if (mask & IBV_QP_PORT) q.attr.port_num = a.port_num;
    if (mask & IBV_QP_ACCESS_FLAGS) q.attr.qp_access_flags = a.qp_access_flags;
    if (mask & IBV_QP_PKEY_INDEX) q.attr.pkey_index = a.pkey_index;
    if (mask & IBV_QP_AV) q.attr.ah_attr = a.ah_attr;
    if (mask & IBV_QP_PATH_MTU) q.attr.path_mtu = a.path_mtu;
    if (mask & IBV_QP_DEST_QPN) q.attr.dest_qp_num = a.dest_qp_num;
    if (mask & IBV_QP_RQ_PSN) q.attr.rq_psn = a.rq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q.attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) q.attr.min_rnr_timer = a.min_rnr_timer;
    if (mask & IBV_QP_SQ_PSN) q.attr.sq_psn = a.sq_psn;
    if (mask & IBV_QP_TIMEOUT) q.attr.timeout = a.timeout;
    if (mask & IBV_QP_RETRY_CNT) q.attr.retry_cnt = a.retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) q.attr.rnr_retry = a.rnr_retry;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q.attr.max_rd_atomic = a.max_rd_atomic;
    q.qp.state = to;
    q.attr.qp_state = to;
    if (to == IBV_QPS_RESET) q.recvs.clear();
    return 0;
}

bool FakeVerbs::check_values(Qp& q, ibv_qp_state to, const ibv_qp_attr& a, int mask) {
    const auto& ports = q.ctx->dev->cfg.ports;
    const auto bad = [&](const std::string& why) {
        refuse(EINVAL, std::string("modify_qp ->") + state_name(to) + ": " + why);
        return false;
    };
    if ((mask & IBV_QP_PORT) && (a.port_num == 0 || a.port_num > ports.size()))
        return bad("no port " + std::to_string(a.port_num));
    if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index != 0) return bad("pkey_index beyond the P_Key table");
    if (to == IBV_QPS_RTR) {
        const FakePort& port = ports[q.attr.port_num - 1];
        const ibv_ah_attr& ah = a.ah_attr;
        if (!ah.is_global) return bad("RoCE needs a global address vector (is_global=1)");
        if (zero_gid(ah.grh.dgid.raw)) return bad("dgid is zero");
        if (ah.port_num != q.attr.port_num) return bad("ah_attr.port_num differs from the QP's port");
        if (std::none_of(port.gids.begin(), port.gids.end(), [&](const GidEntry& g) { return g.index == ah.grh.sgid_index; }))
            return bad("sgid_index " + std::to_string(ah.grh.sgid_index) + " is not in the GID table");
        if (a.path_mtu > port.active_mtu) return bad("path_mtu above the port's active MTU");
        if (a.dest_qp_num == 0 || a.dest_qp_num > k24Bits) return bad("dest_qp_num out of range");
        if (a.rq_psn > k24Bits) return bad("rq_psn over 24 bits");
    }
    if (to == IBV_QPS_RTS) {
        if (a.sq_psn > k24Bits) return bad("sq_psn over 24 bits");
        if (a.timeout > 31 || a.retry_cnt > 7 || a.rnr_retry > 7) return bad("timeout/retry_cnt/rnr_retry out of range");
    }
    return true;
}

ibv_mr* FakeVerbs::reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    std::lock_guard lock(mu_);
    // Remote write needs local write, as the verbs spec says.
    if (!pds_.count(pd) || addr == nullptr || length == 0 ||
        ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
        refuse(EINVAL, "reg_mr: bad PD, range or access");
        return nullptr;
    }
    auto mr = std::make_unique<Mr>();
    mr->mr.context = pd->context;
    mr->mr.pd = pd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.lkey = mr->mr.rkey = next_key_++;
    mr->access = access;
    ibv_mr* p = &mr->mr;
    mrs_[p] = std::move(mr);
    return p;
}

int FakeVerbs::dereg_mr(ibv_mr* mr) {
    std::lock_guard lock(mu_);
    return mrs_.erase(mr) ? 0 : refuse(EINVAL, "dereg_mr: unknown MR");
}

const FakeVerbs::Mr* FakeVerbs::local_mr(const ibv_sge& sge, bool needs_write) const {
    for (const auto& [k, m] : mrs_) {
        if (m->mr.lkey != sge.lkey) continue;
        const auto base = reinterpret_cast<uintptr_t>(m->mr.addr);
        if (sge.addr < base || sge.addr + sge.length > base + m->mr.length) return nullptr;
        if (needs_write && !(m->access & IBV_ACCESS_LOCAL_WRITE)) return nullptr;
        return m.get();
    }
    return nullptr;
}

int FakeVerbs::post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    std::lock_guard lock(mu_);
    Qp* q = qp_of(qp);
    for (; wr != nullptr; wr = wr->next) {
        *bad_wr = wr;
        if (q == nullptr || q->qp.state == IBV_QPS_RESET) return refuse(EINVAL, "post_recv on a QP in RESET");
        if (wr->num_sge != 1 || local_mr(wr->sg_list[0], true) == nullptr)
            return refuse(EINVAL, "post_recv: the SGE is not inside a local MR with LOCAL_WRITE");
        if (q->recvs.size() >= q->init.cap.max_recv_wr) return refuse(ENOMEM, "post_recv: receive queue full");
        q->recvs.push_back({wr->wr_id, wr->sg_list[0]});
    }
    *bad_wr = nullptr;
    return 0;
}

void FakeVerbs::complete(Cq& cq, const ibv_wc& wc, uint32_t covered) {
    if (cq.entries.size() >= static_cast<size_t>(cq.cq.cqe)) cq.overrun = true;
    cq.entries.push_back({wc, covered});
}

ibv_wc_status FakeVerbs::deliver_send(Qp& peer, const ibv_send_wr& wr, uint32_t length) {
    if (peer.recvs.empty()) return IBV_WC_RNR_RETRY_EXC_ERR;
    const Recv r = peer.recvs.front();
    peer.recvs.pop_front();
    ibv_wc wc{};
    wc.wr_id = r.wr_id;
    wc.qp_num = peer.qp.qp_num;
    wc.opcode = IBV_WC_RECV;
    if (length > r.sge.length) {
        wc.status = IBV_WC_LOC_LEN_ERR;
        complete(*peer.recv_cq, wc, 0);
        peer.qp.state = IBV_QPS_ERR;
        return IBV_WC_REM_INV_REQ_ERR;
    }
    if (length > 0)
        std::memcpy(reinterpret_cast<void*>(r.sge.addr), reinterpret_cast<const void*>(wr.sg_list[0].addr), length);
    wc.status = IBV_WC_SUCCESS;
    wc.byte_len = length;
    complete(*peer.recv_cq, wc, 0);
    ++sends_delivered_;
    return IBV_WC_SUCCESS;
}

ibv_wc_status FakeVerbs::execute(Qp& q, const ibv_send_wr& wr, Qp*& peer_out) {
    if (q.qp.state == IBV_QPS_ERR) return IBV_WC_WR_FLUSH_ERR;
    uint32_t length = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
        if (local_mr(wr.sg_list[i], false) == nullptr) return IBV_WC_LOC_PROT_ERR;
        length += wr.sg_list[i].length;
    }
    if (wr.num_sge > 1) return IBV_WC_LOC_QP_OP_ERR;  // the backend never gathers; keep the fake simple
    Qp* peer = find_qp(q.attr.dest_qp_num);
    // A peer that is gone, not yet at RTR or connected elsewhere never answers: retries run out.
    if (peer == nullptr || (peer->qp.state != IBV_QPS_RTR && peer->qp.state != IBV_QPS_RTS) ||
        peer->attr.dest_qp_num != q.qp.qp_num)
        return IBV_WC_RETRY_EXC_ERR;
    peer_out = peer;
    if (wr.opcode == IBV_WR_SEND) return deliver_send(*peer, wr, length);
    if (wr.opcode != IBV_WR_RDMA_WRITE) return IBV_WC_LOC_QP_OP_ERR;
    for (const auto& [k, m] : mrs_) {
        if (m->mr.rkey != wr.wr.rdma.rkey || m->mr.pd != peer->qp.pd) continue;
        const auto base = reinterpret_cast<uintptr_t>(m->mr.addr);
        if (!(m->access & IBV_ACCESS_REMOTE_WRITE) || !(peer->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) ||
            wr.wr.rdma.remote_addr < base || wr.wr.rdma.remote_addr + length > base + m->mr.length)
            return IBV_WC_REM_ACCESS_ERR;
        if (length > 0)
            std::memcpy(reinterpret_cast<void*>(wr.wr.rdma.remote_addr), reinterpret_cast<const void*>(wr.sg_list[0].addr),
                        length);
        return IBV_WC_SUCCESS;
    }
    return IBV_WC_REM_ACCESS_ERR;
}

int FakeVerbs::post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    std::lock_guard lock(mu_);
    Qp* q = qp_of(qp);
    for (; wr != nullptr; wr = wr->next) {
        *bad_wr = wr;
        if (q == nullptr) return refuse(EINVAL, "post_send: unknown QP");
        if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR)
            return refuse(EINVAL, std::string("post_send on a QP in ") + state_name(q->qp.state));
        if (q->sq_outstanding >= q->init.cap.max_send_wr) return refuse(ENOMEM, "post_send: send queue full");
        ++q->sq_outstanding;
        Qp* peer = nullptr;
        const ibv_wc_status status = execute(*q, *wr, peer);
        const bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) || q->init.sq_sig_all;
        ++q->unsignaled;
        if (status == IBV_WC_SUCCESS && !signaled) continue;
        ibv_wc wc{};
        wc.wr_id = wr->wr_id;
        wc.status = status;
        wc.qp_num = q->qp.qp_num;
        wc.opcode = wr->opcode == IBV_WR_SEND ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
        complete(*q->send_cq, wc, q->unsignaled);
        q->unsignaled = 0;
        if (status != IBV_WC_SUCCESS) q->qp.state = IBV_QPS_ERR;
    }
    *bad_wr = nullptr;
    return 0;
}

int FakeVerbs::poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
    std::lock_guard lock(mu_);
    const auto it = cqs_.find(cq);
    if (it == cqs_.end()) return -EINVAL;
    Cq& c = *it->second;
    if (c.overrun) return -EOVERFLOW;  // hardware raises IBV_EVENT_CQ_ERR; the CQ is lost either way
    int n = 0;
    for (; n < num_entries && !c.entries.empty(); ++n) {
        const Cq::Entry e = c.entries.front();
        c.entries.pop_front();
        wc[n] = e.wc;
        if (e.covered > 0)
            if (Qp* q = find_qp(e.wc.qp_num)) q->sq_outstanding -= std::min(e.covered, q->sq_outstanding);
    }
    return n;
}

ibv_qp_state FakeVerbs::qp_state(uint32_t qpn) const {
    std::lock_guard lock(mu_);
    const Qp* q = find_qp(qpn);
    return q ? q->qp.state : IBV_QPS_UNKNOWN;
}

ibv_qp_attr FakeVerbs::qp_attr(uint32_t qpn) const {
    std::lock_guard lock(mu_);
    const Qp* q = find_qp(qpn);
    return q ? q->attr : ibv_qp_attr{};
}

std::string FakeVerbs::last_error() const {
    std::lock_guard lock(mu_);
    return last_error_;
}

std::size_t FakeVerbs::live_objects() const {
    std::lock_guard lock(mu_);
    return contexts_.size() + pds_.size() + cqs_.size() + qps_.size() + mrs_.size();
}

uint64_t FakeVerbs::sends_delivered() const {
    std::lock_guard lock(mu_);
    return sends_delivered_;
}

}  // namespace fedgate::testing
