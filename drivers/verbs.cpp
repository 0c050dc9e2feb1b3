// The verbs backend: device and GID choice, QP transitions, and the byte stream over RDMA WRITE
// plus SEND messages (see verbs.hpp for the scheme).
#include "drivers/verbs.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "proto/conn_wire.hpp"

namespace fedgate {
namespace {

constexpr char kNoDeviceError[] =
    "no RDMA device: ibv_get_device_list found none (is an RDMA NIC or rxe configured?)";

// ---- the messages each side SENDs (network byte order) ---------------------------------------
// version(1) kind(1) reserved(2) length(4) offset(8) consumed(8) recvs_posted(8)
constexpr uint8_t kMsgVersion = 1;
constexpr uint32_t kMsgBytes = 32;
constexpr uint32_t kSendBufs = 16;  // SENDs in flight; each has its own message buffer
constexpr int kSendDepth = 2 * kSendBufs + 4;  // a WRITE and a SEND per chunk
constexpr int kCqDepth = kSendDepth + kRecvDepth + 16;
constexpr uint32_t kDataReserve = 2;  // peer receives a data message leaves for credit and fin
constexpr int kPollBatch = 16;
constexpr uint64_t kRecvTag = 1ull << 40;
constexpr uint64_t kSendTag = 2ull << 40;
constexpr uint64_t kIndexMask = 0xffffffffull;

struct Msg {
    uint8_t kind = 0;
    uint32_t length = 0;
    uint64_t offset = 0;
    uint64_t consumed = 0;
    uint64_t recvs_posted = 0;
};

void encode_msg(const Msg& m, uint8_t* p) {
    p[0] = kMsgVersion;
    p[1] = m.kind;
    p[2] = p[3] = 0;
    store_be32(p + 4, m.length);
    store_be64(p + 8, m.offset);
    store_be64(p + 16, m.consumed);
    store_be64(p + 24, m.recvs_posted);
}

std::optional<Msg> decode_msg(const uint8_t* p, uint32_t byte_len) {
    if (byte_len != kMsgBytes || p[0] != kMsgVersion) return std::nullopt;
    return Msg{p[1], load_be32(p + 4), load_be64(p + 8), load_be64(p + 16), load_be64(p + 24)};
}

// ---- GIDs -------------------------------------------------------------------------------------
bool is_zero(const std::array<uint8_t, 16>& g) {
    return std::all_of(g.begin(), g.end(), [](uint8_t b) { return b == 0; });
}
bool is_link_local(const std::array<uint8_t, 16>& g) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }
bool same_subnet(uint32_t a, uint32_t b, uint8_t prefix_len) {
    if (prefix_len == 0) return true;
    const uint32_t mask = prefix_len >= 32 ? ~0u : ~0u << (32 - prefix_len);
    return (a & mask) == (b & mask);
}
std::string format_ipv4(uint32_t host_order) {
    in_addr a{htonl(host_order)};
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &a, buf, sizeof buf);
    return buf;
}
bool usable_v2(const GidEntry& e) {
    return e.type == GidEntry::Type::roce_v2 && !is_zero(e.gid) && !is_link_local(e.gid);
}

std::string describe_entry(const GidEntry& e) {
    std::string s = std::to_string(e.index) + " " + format_gid(e.gid) + " (" + gid_type_name(e.type);
    if (is_zero(e.gid)) s += ", zero";
    if (is_link_local(e.gid)) s += ", link-local";
    return s + ")";
}
std::string describe_table(std::span<const GidEntry> table) {
    if (table.empty()) return "the GID table is empty";
    std::string s = "found:";
    for (const GidEntry& e : table) s += (s.size() > 6 ? "; " : " ") + describe_entry(e);
    return s;
}

std::optional<uint32_t> user_gid(std::span<const GidEntry> table, uint32_t index, std::string* why) {
    const auto it = std::find_if(table.begin(), table.end(), [&](const GidEntry& e) { return e.index == index; });
    if (it == table.end()) {
        if (why) *why = "GID index " + std::to_string(index) + " does not exist; " + describe_table(table);
        return std::nullopt;
    }
    if (it->type != GidEntry::Type::roce_v2) {
        if (why) *why = "GID index " + std::to_string(index) + " is " + gid_type_name(it->type) + ", not roce_v2";
        return std::nullopt;
    }
    return index;
}

int errno_or(int fallback) { return errno != 0 ? errno : fallback; }
std::string errstr(int err) { return std::strerror(err); }

}  // namespace

// Adaptive wait for an empty CQ: spin briefly, then yield, then sleep, so an idle side does not
// hold a core that a peer on the same machine needs.
class VerbsBackoff {
public:
    void reset() { idle_ = 0; }
    void wait() {
        ++idle_;
        if (idle_ < kSpins) return;
        if (idle_ < kYields) {
            std::this_thread::yield();
            return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }

private:
    static constexpr unsigned kSpins = 64;
    static constexpr unsigned kYields = 1024;
    unsigned idle_ = 0;
};


const char* gid_type_name(GidEntry::Type t) {
    switch (t) {
        case GidEntry::Type::ib: return "ib";
        case GidEntry::Type::roce_v1: return "roce_v1";
        case GidEntry::Type::roce_v2: return "roce_v2";
    }
    return "unknown";
}

std::string format_gid(const std::array<uint8_t, 16>& gid) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, gid.data(), buf, sizeof buf);
    return buf;
}

std::optional<uint32_t> select_gid(std::span<const GidEntry> table, const RdmaOptions& o, std::string* why) {
    if (o.gid_index) return user_gid(table, *o.gid_index, why);
    std::optional<uint32_t> best;
    for (const GidEntry& e : table) {
        const auto mapped = gid_ipv4(e.gid);  // proto/conn_wire.hpp
        if (!usable_v2(e) || !mapped) continue;
        if (o.local_ipv4 != 0 && !same_subnet(*mapped, o.local_ipv4, o.prefix_len)) continue;
        if (!best || e.index < *best) best = e.index;
    }
    if (!best && why) {
        const std::string wanted = o.local_ipv4 != 0
                                       ? "an IPv4-mapped RoCE v2 GID in " + format_ipv4(o.local_ipv4) + "/" +
                                             std::to_string(o.prefix_len)
                                       : "an IPv4-mapped RoCE v2 GID";
        *why = "no GID fits (wanted " + wanted + "); " + describe_table(table);
    }
    return best;
}

std::optional<ibv_mtu> to_ibv_mtu(uint16_t bytes) {
    switch (bytes) {
        case 256: return IBV_MTU_256;
        case 512: return IBV_MTU_512;
        case 1024: return IBV_MTU_1024;
        case 2048: return IBV_MTU_2048;
        case 4096: return IBV_MTU_4096;
        default: return std::nullopt;
    }
}

uint16_t from_ibv_mtu(ibv_mtu mtu) {
    switch (mtu) {
        case IBV_MTU_256: return 256;
        case IBV_MTU_512: return 512;
        case IBV_MTU_1024: return 1024;
        case IBV_MTU_2048: return 2048;
        case IBV_MTU_4096: return 4096;
    }
    return 0;
}

QpTransition qp_init_attr(uint8_t port, unsigned access) {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_INIT;
    t.attr.pkey_index = 0;
    t.attr.port_num = port;
    t.attr.qp_access_flags = access;
    t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    return t;
}

QpTransition qp_rtr_attr(const RemoteQp& r, uint32_t sgid_index, uint8_t port) {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTR;
    t.attr.path_mtu = to_ibv_mtu(r.mtu).value_or(IBV_MTU_256);  // connect() refuses invalid MTUs first
    t.attr.dest_qp_num = r.qpn;
    t.attr.rq_psn = r.psn;
    t.attr.max_dest_rd_atomic = 1;
    t.attr.min_rnr_timer = kQpMinRnrTimer;
    ibv_ah_attr& ah = t.attr.ah_attr;
    ah.is_global = 1;  // RoCE routes by GID: every packet has a GRH
    ah.port_num = port;
    ah.grh.hop_limit = kGrhHopLimit;
    ah.grh.sgid_index = static_cast<uint8_t>(sgid_index);
    std::memcpy(ah.grh.dgid.raw, r.gid.data(), r.gid.size());
    t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return t;
}

QpTransition qp_rts_attr(uint32_t local_psn) {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTS;
    t.attr.timeout = kQpTimeout;
    t.attr.retry_cnt = kQpRetryCount;
    t.attr.rnr_retry = kQpRnrRetry;
    t.attr.sq_psn = local_psn;
    t.attr.max_rd_atomic = 1;
    t.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC;
    return t;
}

// ---- RdmaDevice -------------------------------------------------------------------------------

namespace {

ibv_device* pick_device(VerbsApi& api, ibv_device** list, int n, const std::optional<std::string>& wanted,
                        std::string& error) {
    if (!wanted) return list[0];
    std::string names;
    for (int i = 0; i < n; ++i) {
        const std::string name = api.get_device_name(list[i]);
        if (name == *wanted) return list[i];
        names += (names.empty() ? "" : ", ") + name;
    }
    error = "RDMA device \"" + *wanted + "\" not found; devices: " + names;
    return nullptr;
}

GidEntry::Type gid_type_of(uint32_t t) {
    switch (t) {
        case IBV_GID_TYPE_ROCE_V1: return GidEntry::Type::roce_v1;
        case IBV_GID_TYPE_ROCE_V2: return GidEntry::Type::roce_v2;
        default: return GidEntry::Type::ib;
    }
}

}  // namespace

std::unique_ptr<RdmaDevice> RdmaDevice::open(VerbsApi& api, const RdmaOptions& options, std::string& error) {
    int n = 0;
    ibv_device** list = api.get_device_list(&n);
    if (list == nullptr || n <= 0) {
        if (list != nullptr) api.free_device_list(list);
        error = kNoDeviceError;
        return nullptr;
    }
    std::unique_ptr<RdmaDevice> dev;
    if (ibv_device* chosen = pick_device(api, list, n, options.device, error)) {
        dev.reset(new RdmaDevice(api));
        dev->name_ = api.get_device_name(chosen);
        errno = 0;
        dev->context_ = api.open_device(chosen);
        if (dev->context_ == nullptr) {
            error = "cannot open RDMA device " + dev->name_ + ": " + errstr(errno_or(ENODEV));
            dev.reset();
        }
    }
    api.free_device_list(list);  // an open context stays valid without the list
    if (!dev || !dev->open_port(options, error)) return nullptr;
    return dev;
}

bool RdmaDevice::open_port(const RdmaOptions& options, std::string& error) {
    port_ = options.port.value_or(kDefaultRdmaPort);
    const std::string where = "RDMA device " + name_ + " port " + std::to_string(port_);
    ibv_device_attr dattr{};
    if (const int rc = api_->query_device(context_, &dattr); rc != 0) {
        error = "cannot query RDMA device " + name_ + ": " + errstr(rc);
        return false;
    }
    if (port_ == 0 || port_ > dattr.phys_port_cnt) {
        error = "RDMA device " + name_ + " has no port " + std::to_string(port_) + " (ports 1-" +
                std::to_string(dattr.phys_port_cnt) + ")";
        return false;
    }
    ibv_port_attr pattr{};
    if (const int rc = api_->query_port(context_, port_, &pattr); rc != 0) {
        error = "cannot query " + where + ": " + errstr(rc);
        return false;
    }
    if (pattr.state != IBV_PORT_ACTIVE) {
        error = where + " is not active (state " + ibv_port_state_str(pattr.state) + ")";
        return false;
    }
    active_mtu_bytes_ = from_ibv_mtu(pattr.active_mtu);

    std::vector<ibv_gid_entry> raw(static_cast<size_t>(dattr.phys_port_cnt) * std::max(pattr.gid_tbl_len, 1));
    const ssize_t got = api_->query_gid_table(context_, raw.data(), raw.size());
    if (got < 0) {
        error = "cannot read the GID table of " + where + ": " + errstr(static_cast<int>(-got));
        return false;
    }
    std::vector<GidEntry> table;
    for (ssize_t i = 0; i < got; ++i) {
        const ibv_gid_entry& r = raw[static_cast<size_t>(i)];
        if (r.port_num != port_) continue;
        GidEntry e{r.gid_index, {}, gid_type_of(r.gid_type), r.ndev_ifindex};
        std::memcpy(e.gid.data(), r.gid.raw, e.gid.size());
        table.push_back(e);
    }
    std::string why;
    const std::optional<uint32_t> index = select_gid(table, options, &why);
    if (!index) {
        error = where + ": " + why;
        return false;
    }
    gid_index_ = *index;
    gid_ = std::find_if(table.begin(), table.end(), [&](const GidEntry& e) { return e.index == *index; })->gid;

    errno = 0;
    pd_ = api_->alloc_pd(context_);
    if (pd_ == nullptr) {
        error = "cannot allocate a protection domain on RDMA device " + name_ + ": " + errstr(errno_or(ENOMEM));
        return false;
    }
    return true;
}

RdmaDevice::~RdmaDevice() {
    if (pd_ != nullptr) api_->dealloc_pd(pd_);
    if (context_ != nullptr) api_->close_device(context_);
}

// ---- RdmaConnection: set-up ----------------------------------------------------------------------

enum class RdmaConnection::MsgKind : uint8_t { data = 1, credit = 2, fin = 3 };

const char* RdmaConnection::stage_name(Stage s) { return s == Stage::rtr ? "rtr" : "rts"; }

RdmaConnection::RdmaConnection(RdmaDevice& device)
    : device_(&device),
      api_(&device.api()),
      send_buf_busy_(kSendBufs, 0),
      send_buf_staging_(kSendBufs, -1),
      staging_busy_(kStagingSlots, 0) {}

std::unique_ptr<RdmaConnection> RdmaConnection::prepare(RdmaDevice& device, std::string& error) {
    std::unique_ptr<RdmaConnection> c(new RdmaConnection(device));
    if (!c->create_resources(error) || !c->post_initial_receives(error)) return nullptr;
    return c;
}

bool RdmaConnection::create_resources(std::string& error) {
    const std::string on = " on RDMA device " + device_->name();
    errno = 0;
    cq_ = api_->create_cq(device_->context(), kCqDepth);
    if (cq_ == nullptr) {
        error = "ibv_create_cq failed" + on + ": " + errstr(errno_or(ENOMEM));
        return false;
    }
    ibv_qp_init_attr init{};
    init.send_cq = cq_;
    init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = kSendDepth;
    init.cap.max_recv_wr = kRecvDepth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    errno = 0;
    qp_ = api_->create_qp(device_->pd(), &init);
    if (qp_ == nullptr) {
        error = "ibv_create_qp (RC) failed" + on + ": " + errstr(errno_or(ENOMEM));
        return false;
    }
    ring_.assign(kRecvRingBytes, 0);
    staging_.assign(size_t{kStagingSlots} * kStagingSlotBytes, 0);
    msgs_.assign(size_t{kRecvDepth + kSendBufs} * kMsgBytes, 0);
    const auto reg = [&](std::vector<uint8_t>& buf, int access, const char* what) -> ibv_mr* {
        errno = 0;
        ibv_mr* mr = api_->reg_mr(device_->pd(), buf.data(), buf.size(), access);
        if (mr == nullptr) error = std::string("ibv_reg_mr of the ") + what + on + " failed: " + errstr(errno_or(ENOMEM));
        return mr;
    };
    ring_mr_ = reg(ring_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "receive ring");
    if (ring_mr_ == nullptr) return false;
    staging_mr_ = reg(staging_, IBV_ACCESS_LOCAL_WRITE, "send staging buffer");
    if (staging_mr_ == nullptr) return false;
    msgs_mr_ = reg(msgs_, IBV_ACCESS_LOCAL_WRITE, "message buffers");
    if (msgs_mr_ == nullptr) return false;

    psn_ = std::random_device{}() & kMaxPsn;
    QpTransition t = qp_init_attr(device_->port(), IBV_ACCESS_REMOTE_WRITE);
    if (const int rc = api_->modify_qp(qp_, &t.attr, t.mask); rc != 0) {
        error = "QP " + std::to_string(qp_->qp_num) + on + ": RESET->INIT refused: " + errstr(rc);
        return false;
    }
    return true;
}

bool RdmaConnection::post_initial_receives(std::string& error) {
    for (uint32_t slot = 0; slot < kRecvDepth; ++slot) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(msgs_.data() + size_t{slot} * kMsgBytes), kMsgBytes, msgs_mr_->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = kRecvTag | slot;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (const int rc = api_->post_recv(qp_, &wr, &bad); rc != 0) {
            error = "ibv_post_recv on QP " + std::to_string(qp_->qp_num) + " failed: " + errstr(rc);
            return false;
        }
        ++recvs_posted_;
    }
    recvs_reported_ = recvs_posted_;  // the peer assumes kRecvDepth from the start
    return true;
}

RdmaConnection::~RdmaConnection() {
    if (qp_ != nullptr) api_->destroy_qp(qp_);
    for (ibv_mr* mr : {msgs_mr_, staging_mr_, ring_mr_})
        if (mr != nullptr) api_->dereg_mr(mr);
    if (cq_ != nullptr) api_->destroy_cq(cq_);
}

LocalQp RdmaConnection::local() const {
    return {qp_->qp_num, psn_, device_->active_mtu_bytes(), device_->gid(), ring_mr_->rkey,
            reinterpret_cast<uintptr_t>(ring_.data()), static_cast<uint32_t>(ring_.size())};
}

bool RdmaConnection::fail_connect(Stage stage, std::string message, std::string& error, Stage* failed) {
    error = std::move(message);
    if (failed != nullptr) *failed = stage;
    return false;
}

bool RdmaConnection::connect(const RemoteQp& remote, ProcessId local_pid, ProcessId peer_pid, uint64_t conn_id,
                             std::string& error, Stage* failed) {
    const std::string qp = "QP " + std::to_string(qp_->qp_num) + " on RDMA device " + device_->name();
    if (connected_) return fail_connect(Stage::rtr, qp + " is already connected", error, failed);
    if (remote.qpn == 0 || remote.qpn > kMaxPsn)
        return fail_connect(Stage::rtr, "peer QP number " + std::to_string(remote.qpn) + " is not a 24-bit QPN", error, failed);
    if (remote.psn > kMaxPsn)
        return fail_connect(Stage::rtr, "peer PSN " + std::to_string(remote.psn) + " is over 24 bits", error, failed);
    if (!valid_rdma_mtu(remote.mtu))
        return fail_connect(Stage::rtr, "peer MTU " + std::to_string(remote.mtu) + " is not an RDMA path MTU", error, failed);
    if (is_zero(remote.gid)) return fail_connect(Stage::rtr, "peer GID is zero", error, failed);
    if (remote.rlen < kMinRemoteRing)
        return fail_connect(Stage::rtr, "peer receive ring of " + std::to_string(remote.rlen) + " bytes is under " +
                                            std::to_string(kMinRemoteRing), error, failed);
    RemoteQp path = remote;
    path.mtu = negotiate_mtu(device_->active_mtu_bytes(), remote.mtu);
    QpTransition rtr = qp_rtr_attr(path, device_->gid_index(), device_->port());
    if (const int rc = api_->modify_qp(qp_, &rtr.attr, rtr.mask); rc != 0)
        return fail_connect(Stage::rtr, qp + ": INIT->RTR refused: " + errstr(rc), error, failed);
    QpTransition rts = qp_rts_attr(psn_);
    if (const int rc = api_->modify_qp(qp_, &rts.attr, rts.mask); rc != 0)
        return fail_connect(Stage::rts, qp + ": RTR->RTS refused: " + errstr(rc), error, failed);
    remote_ = remote;
    path_mtu_ = path.mtu;
    local_pid_ = local_pid;
    peer_pid_ = peer_pid;
    conn_id_ = conn_id;
    connected_ = true;
    return true;
}

std::optional<RdmaPath> RdmaConnection::rdma_path() const {
    if (!connected_) return std::nullopt;
    const RemoteQp& r = remote_;
    const RdmaQpParams peer{r.qpn, r.psn, r.mtu, r.gid, r.rkey, r.raddr, r.rlen};
    return RdmaPath{peer, r.psn, psn_, path_mtu_};
}

// ---- RdmaConnection: completions ---------------------------------------------------------------

void RdmaConnection::require_connected(const char* what) const {
    if (!connected_) throw ConnectionError(std::string(what) + " on an RDMA connection that is not connected");
    if (cancelled_.load(std::memory_order_relaxed))
        throw ConnectionError(std::string(what) + " on QP " + std::to_string(qp_->qp_num) + ", which was cancelled");
}

bool RdmaConnection::progress() {
    ibv_wc wc[kPollBatch];
    const int n = api_->poll_cq(cq_, kPollBatch, wc);
    if (n < 0) throw ConnectionError("ibv_poll_cq failed on QP " + std::to_string(qp_->qp_num));
    for (int i = 0; i < n; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            const char* op = (wc[i].wr_id & kRecvTag) ? "a receive" : (wc[i].wr_id & kSendTag) ? "a SEND" : "an RDMA WRITE";
            throw ConnectionError("RDMA completion error on QP " + std::to_string(qp_->qp_num) + " (device " +
                                  device_->name() + ") for " + op + ": " + ibv_wc_status_str(wc[i].status) +
                                  " (status " + std::to_string(wc[i].status) + ", vendor error " +
                                  std::to_string(wc[i].vendor_err) + ")");
        }
        if (wc[i].wr_id & kRecvTag)
            handle_recv(wc[i]);
        else if (wc[i].wr_id & kSendTag)
            handle_send_done(wc[i]);
    }
    return n > 0;
}

void RdmaConnection::handle_recv(const ibv_wc& wc) {
    const uint32_t slot = static_cast<uint32_t>(wc.wr_id & kIndexMask);
    const std::optional<Msg> m = decode_msg(msgs_.data() + size_t{slot} * kMsgBytes, wc.byte_len);
    const auto protocol = [&](const std::string& what) {
        return ConnectionError("RDMA peer of QP " + std::to_string(qp_->qp_num) + " broke the protocol: " + what);
    };
    if (!m) throw protocol("malformed message of " + std::to_string(wc.byte_len) + " bytes");
    if (m->consumed > sent_ || m->consumed < peer_consumed_) throw protocol("credit beyond what was sent");
    peer_consumed_ = m->consumed;
    peer_recvs_posted_ = std::max(peer_recvs_posted_, m->recvs_posted);
    const auto kind = static_cast<MsgKind>(m->kind);
    if (kind == MsgKind::data || kind == MsgKind::fin) {
        if (peer_fin_ || m->offset != arrived_) throw protocol("data out of order or after fin");
    }
    if (kind == MsgKind::data) {
        const uint64_t pos = m->offset % ring_.size();
        if (m->length == 0 || pos + m->length > ring_.size() || arrived_ + m->length - consumed_ > ring_.size())
            throw protocol("data beyond the receive ring");
        arrived_ += m->length;
    } else if (kind == MsgKind::fin) {
        peer_fin_ = true;
    } else if (kind != MsgKind::credit) {
        throw protocol("unknown message kind " + std::to_string(m->kind));
    }
    repost_recv(slot);
}

void RdmaConnection::repost_recv(uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(msgs_.data() + size_t{slot} * kMsgBytes), kMsgBytes, msgs_mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvTag | slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (const int rc = api_->post_recv(qp_, &wr, &bad); rc != 0)
        throw ConnectionError("ibv_post_recv on QP " + std::to_string(qp_->qp_num) + " failed: " + errstr(rc));
    ++recvs_posted_;
}

void RdmaConnection::handle_send_done(const ibv_wc& wc) {
    const uint32_t buf = static_cast<uint32_t>(wc.wr_id & kIndexMask);
    send_buf_busy_[buf] = 0;
    if (send_buf_staging_[buf] >= 0) staging_busy_[static_cast<size_t>(send_buf_staging_[buf])] = 0;
    send_buf_staging_[buf] = -1;
    --sends_in_flight_;
}

// ---- RdmaConnection: the byte stream -------------------------------------------------------------

void RdmaConnection::idle(Lock& lock, VerbsBackoff& backoff, bool progressed) {
    if (cancelled_.load(std::memory_order_relaxed))
        throw ConnectionError("RDMA connection on QP " + std::to_string(qp_->qp_num) + " was cancelled");
    if (progressed) {
        backoff.reset();
        return;
    }
    lock.unlock();  // the other direction's thread may poll meanwhile
    backoff.wait();
    lock.lock();
}

uint32_t RdmaConnection::wait_send_slot(Lock& lock, uint32_t reserve) {
    VerbsBackoff backoff;
    for (;;) {
        if (sends_in_flight_ < kSendBufs && peer_recvs_posted_ - msgs_sent_ > reserve) {
            for (uint32_t i = 0; i < kSendBufs; ++i)
                if (!send_buf_busy_[i]) return i;
        }
        idle(lock, backoff, progress());
    }
}

uint32_t RdmaConnection::wait_staging_slot(Lock& lock) {
    VerbsBackoff backoff;
    for (;;) {
        for (uint32_t i = 0; i < kStagingSlots; ++i)
            if (!staging_busy_[i]) return i;
        idle(lock, backoff, progress());
    }
}

// Posts one message (for data: the RDMA WRITE of the staging slot, then the SEND naming it).
void RdmaConnection::send_msg(Lock& lock, MsgKind kind, uint64_t offset, uint32_t length, int staging_slot) {
    const uint32_t reserve = kind == MsgKind::data ? kDataReserve : kind == MsgKind::fin ? 1 : 0;
    const uint32_t buf = wait_send_slot(lock, reserve);
    uint8_t* p = msgs_.data() + size_t{kRecvDepth + buf} * kMsgBytes;
    encode_msg({static_cast<uint8_t>(kind), length, offset, consumed_, recvs_posted_}, p);
    ibv_sge msg_sge{reinterpret_cast<uintptr_t>(p), kMsgBytes, msgs_mr_->lkey};
    ibv_send_wr send{};
    send.wr_id = kSendTag | buf;
    send.sg_list = &msg_sge;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED;

    // The data goes first on the same QP: RC delivers the WRITE before the SEND that names it.
    ibv_sge data_sge{};
    ibv_send_wr write{};
    if (kind == MsgKind::data) {
        data_sge = {reinterpret_cast<uintptr_t>(staging_.data() + size_t(staging_slot) * kStagingSlotBytes), length,
                    staging_mr_->lkey};
        write.wr_id = 0;
        write.sg_list = &data_sge;
        write.num_sge = 1;
        write.opcode = IBV_WR_RDMA_WRITE;
        write.wr.rdma.remote_addr = remote_.raddr + offset % remote_.rlen;
        write.wr.rdma.rkey = remote_.rkey;
        write.next = &send;
    }
    ibv_send_wr* bad = nullptr;
    if (const int rc = api_->post_send(qp_, kind == MsgKind::data ? &write : &send, &bad); rc != 0)
        throw ConnectionError("ibv_post_send on QP " + std::to_string(qp_->qp_num) + " failed: " + errstr(rc));
    send_buf_busy_[buf] = 1;
    send_buf_staging_[buf] = staging_slot;
    ++sends_in_flight_;
    ++msgs_sent_;
    consumed_reported_ = consumed_;
    recvs_reported_ = recvs_posted_;
}

void RdmaConnection::send_all(std::span<const uint8_t> data) {
    require_connected("send_all");
    Lock lock(mu_);
    if (fin_sent_) throw ConnectionError("send_all after shutdown_send on QP " + std::to_string(qp_->qp_num));
    VerbsBackoff backoff;
    size_t done = 0;
    while (done < data.size()) {
        if (sent_ - peer_consumed_ >= remote_.rlen) {  // the peer's ring is full of unread bytes
            idle(lock, backoff, progress());
            continue;
        }
        backoff.reset();
        const uint32_t slot = wait_staging_slot(lock);
        const uint64_t window = remote_.rlen - (sent_ - peer_consumed_);
        const uint64_t contiguous = remote_.rlen - sent_ % remote_.rlen;
        const auto n = static_cast<uint32_t>(
            std::min<uint64_t>({data.size() - done, window, contiguous, kStagingSlotBytes}));
        std::memcpy(staging_.data() + size_t{slot} * kStagingSlotBytes, data.data() + done, n);
        staging_busy_[slot] = 1;
        send_msg(lock, MsgKind::data, sent_, n, static_cast<int>(slot));
        sent_ += n;
        done += n;
    }
}

// Tells the peer what we have read and which receives we have reposted, once enough has built up
// that its sender could be waiting for it. Never blocks: the next call tries again.
void RdmaConnection::maybe_return_credit(Lock& lock) {
    const bool bytes_due = consumed_ - consumed_reported_ >= ring_.size() / 4;
    const bool recvs_due = recvs_posted_ - recvs_reported_ >= kRecvDepth / 4;
    if (!bytes_due && !recvs_due) return;
    if (sends_in_flight_ >= kSendBufs || peer_recvs_posted_ == msgs_sent_) return;
    send_msg(lock, MsgKind::credit, sent_, 0, -1);
}

std::size_t RdmaConnection::recv_some(std::span<uint8_t> buf) {
    require_connected("recv_some");
    if (buf.empty()) return 0;
    Lock lock(mu_);
    VerbsBackoff backoff;
    for (;;) {
        if (arrived_ > consumed_) {
            const uint64_t pos = consumed_ % ring_.size();
            const auto n = static_cast<size_t>(std::min<uint64_t>({buf.size(), arrived_ - consumed_, ring_.size() - pos}));
            std::memcpy(buf.data(), ring_.data() + pos, n);
            consumed_ += n;
            maybe_return_credit(lock);
            return n;
        }
        if (peer_fin_) return 0;
        const bool progressed = progress();
        if (!progressed) maybe_return_credit(lock);
        idle(lock, backoff, progressed);
    }
}

void RdmaConnection::shutdown_send() {
    require_connected("shutdown_send");
    Lock lock(mu_);
    if (fin_sent_) return;
    send_msg(lock, MsgKind::fin, sent_, 0, -1);
    fin_sent_ = true;
    // Wait until the peer has acknowledged everything, so closing right after loses nothing.
    VerbsBackoff backoff;
    while (sends_in_flight_ > 0) idle(lock, backoff, progress());
}

void RdmaConnection::cancel() { cancelled_.store(true, std::memory_order_relaxed); }

}  // namespace fedgate
