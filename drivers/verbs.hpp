// The verbs backend of fedgate's connections: RDMA over RoCE v2 with libibverbs (rdma-core).
//
// RdmaDevice opens one port of one device and picks the GID to speak from (select_gid). An
// RdmaConnection is made in two steps around the handshake (conn_wire.hpp): prepare() makes an RC
// QP in INIT with its receive ring registered, local() is what goes into the REQ or REP, and
// connect() takes the peer's values to RTR and RTS.
//
// Data path: the sender copies bytes into a staging slot, RDMA WRITEs them into the peer's receive
// ring at the stream offset modulo the ring size, then SENDs a small message naming offset and
// length. Every message also carries how many bytes its sender has consumed from its own ring and
// how many receives it has posted in all, so the peer never overwrites unread bytes nor sends into
// a missing receive. Blocking calls busy-poll the CQ and back off to short sleeps when idle.
//
// The attribute builders and select_gid are pure, so tests check them from tables. All calls go
// through VerbsApi (verbs_api.hpp): real_verbs() in production, a fake in the unit tests.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fedgate/connection.hpp"
#include "drivers/verbs_api.hpp"

namespace fedgate {

inline constexpr uint8_t kDefaultRdmaPort = 1;
inline constexpr uint8_t kDefaultPrefixLen = 24;
inline constexpr uint32_t kRecvRingBytes = 4u << 20;      // each side's receive ring
inline constexpr uint32_t kStagingSlotBytes = 256u << 10;  // the largest chunk one WRITE carries
inline constexpr uint32_t kStagingSlots = 4;               // chunks in flight per connection
inline constexpr uint32_t kRecvDepth = 128;                // receives posted for the peer's messages
inline constexpr uint32_t kMinRemoteRing = 4096;           // a peer ring smaller than this is refused
// RC retry policy: ~67 ms ACK timeout (4.096 us << 14), 7 retries, RNR retried without limit.
inline constexpr uint8_t kQpTimeout = 14;
inline constexpr uint8_t kQpRetryCount = 7;
inline constexpr uint8_t kQpRnrRetry = 7;
inline constexpr uint8_t kQpMinRnrTimer = 12;  // 0.64 ms
inline constexpr uint8_t kGrhHopLimit = 64;

struct RdmaOptions {
    std::optional<std::string> device;  // e.g. "mlx5_0", "rxe0"; empty: the first device listed
    std::optional<uint8_t> port;        // empty: kDefaultRdmaPort
    std::optional<uint32_t> gid_index;  // empty: select_gid chooses
    uint32_t local_ipv4 = 0;            // host order; the address whose subnet the GID should match
    uint8_t prefix_len = kDefaultPrefixLen;
};

// One row of a port's GID table.
struct GidEntry {
    enum class Type : uint8_t { ib, roce_v1, roce_v2 };
    uint32_t index = 0;
    std::array<uint8_t, 16> gid{};
    Type type = Type::roce_v2;
    uint32_t ifindex = 0;
};
const char* gid_type_name(GidEntry::Type t);
std::string format_gid(const std::array<uint8_t, 16>& gid);  // IPv6 text form, ::ffff:a.b.c.d for IPv4

// The GID index to use. The user's index if given (it must exist and be RoCE v2). Otherwise only
// RoCE v2, non-zero, non-link-local GIDs count: an IPv4-mapped one in local_ipv4's subnet first;
// with local_ipv4 == 0 the lowest-index IPv4-mapped one; the lowest index wins ties. nullopt when
// none fits, `why` (if given) says what the table held.
std::optional<uint32_t> select_gid(std::span<const GidEntry> table, const RdmaOptions& o, std::string* why);

// An ibv_mtu for a path MTU in bytes (256..4096, powers of two); nullopt for anything else.
std::optional<ibv_mtu> to_ibv_mtu(uint16_t bytes);
uint16_t from_ibv_mtu(ibv_mtu mtu);  // 0 for an unknown value

// The peer's side of a connection, as the handshake carries it (ConnParams' RDMA fields).
struct RemoteQp {
    uint32_t qpn = 0;
    uint32_t psn = 0;
    uint16_t mtu = 0;
    std::array<uint8_t, 16> gid{};
    uint32_t rkey = 0;
    uint64_t raddr = 0;
    uint32_t rlen = 0;
    bool operator==(const RemoteQp&) const = default;
};
using LocalQp = RemoteQp;  // our side, the same fields

// One modify_qp call: the attributes and the mask naming which of them count.
struct QpTransition {
    ibv_qp_attr attr{};
    int mask = 0;
};
QpTransition qp_init_attr(uint8_t port, unsigned access);
// r.mtu is the negotiated path MTU and must be valid (to_ibv_mtu); connect() checks it first.
QpTransition qp_rtr_attr(const RemoteQp& r, uint32_t sgid_index, uint8_t port);
QpTransition qp_rts_attr(uint32_t local_psn);

class RdmaDevice {
public:
    // Opens the device and port, checks that the port is active and picks the GID. nullptr and
    // `error` on failure, naming the device, port or GID index at fault.
    static std::unique_ptr<RdmaDevice> open(VerbsApi& api, const RdmaOptions& options, std::string& error);
    ~RdmaDevice();
    RdmaDevice(const RdmaDevice&) = delete;
    RdmaDevice& operator=(const RdmaDevice&) = delete;

    const std::string& name() const { return name_; }
    uint8_t port() const { return port_; }
    const std::array<uint8_t, 16>& gid() const { return gid_; }
    uint32_t gid_index() const { return gid_index_; }
    uint16_t active_mtu_bytes() const { return active_mtu_bytes_; }

    VerbsApi& api() const { return *api_; }
    ibv_context* context() const { return context_; }
    ibv_pd* pd() const { return pd_; }

private:
    explicit RdmaDevice(VerbsApi& api) : api_(&api) {}
    bool open_port(const RdmaOptions& options, std::string& error);

    VerbsApi* api_;
    ibv_context* context_ = nullptr;
    ibv_pd* pd_ = nullptr;
    std::string name_;
    uint8_t port_ = kDefaultRdmaPort;
    std::array<uint8_t, 16> gid_{};
    uint32_t gid_index_ = 0;
    uint16_t active_mtu_bytes_ = 0;
};

class VerbsBackoff;  // verbs.cpp: spin, yield, then sleep while a CQ is empty

// A connection over one RC QP. The RdmaDevice must outlive it. Like a socket: one thread may send
// while another receives (the completion queue and the credit state are shared under a lock that is
// never held while waiting); cancel() wakes both.
class RdmaConnection : public Connection {
public:
    enum class Stage : uint8_t { rtr, rts };
    static const char* stage_name(Stage s);  // "rtr", "rts"

    // CQ, RC QP in INIT, receive ring, staging buffer, receives posted. nullptr and `error` on failure.
    static std::unique_ptr<RdmaConnection> prepare(RdmaDevice& device, std::string& error);
    ~RdmaConnection() override;
    RdmaConnection(const RdmaConnection&) = delete;
    RdmaConnection& operator=(const RdmaConnection&) = delete;

    // What the handshake carries for our side.
    LocalQp local() const;
    // INIT -> RTR -> RTS towards `remote` with the lower of both MTUs. false, `error` and `*failed`
    // (if given) when the peer's values are unusable or a transition is refused.
    bool connect(const RemoteQp& remote, ProcessId local_pid, ProcessId peer_pid, uint64_t conn_id,
                 std::string& error, Stage* failed);

    void send_all(std::span<const uint8_t> data) override;
    std::size_t recv_some(std::span<uint8_t> buf) override;
    void shutdown_send() override;
    void cancel() override;

    Transport transport() const override { return Transport::roce_v2; }
    uint64_t conn_id() const override { return conn_id_; }
    ProcessId local_pid() const override { return local_pid_; }
    ProcessId peer_pid() const override { return peer_pid_; }
    uint16_t path_mtu() const { return path_mtu_; }  // negotiated; 0 before connect()
    // What connect() programmed (remote.psn and rq_psn: the peer's PSN; remote.mtu: the path MTU,
    // as RemoteQp carries it); nullopt before it.
    std::optional<RdmaPath> rdma_path() const override;

private:
    enum class MsgKind : uint8_t;
    explicit RdmaConnection(RdmaDevice& device);
    bool create_resources(std::string& error);
    bool post_initial_receives(std::string& error);
    bool fail_connect(Stage stage, std::string message, std::string& error, Stage* failed);

    using Lock = std::unique_lock<std::mutex>;
    // Polls the CQ once and handles what it finds; false if it was empty. Throws ConnectionError.
    // Called with mu_ held, like everything below that touches the connection's state.
    bool progress();
    // After a poll: carries on at once when it found something, else waits a little without mu_.
    // Throws ConnectionError once cancel() was called.
    void idle(Lock& lock, VerbsBackoff& backoff, bool progressed);
    void handle_recv(const ibv_wc& wc);
    void handle_send_done(const ibv_wc& wc);
    void repost_recv(uint32_t slot);
    // Blocks (polling) until a SEND can go out: a free message buffer, and a peer receive beyond
    // `reserve`.
    uint32_t wait_send_slot(Lock& lock, uint32_t reserve);
    uint32_t wait_staging_slot(Lock& lock);
    void send_msg(Lock& lock, MsgKind kind, uint64_t offset, uint32_t length, int staging_slot);
    void maybe_return_credit(Lock& lock);
    void require_connected(const char* what) const;

    RdmaDevice* device_;
    VerbsApi* api_;
    ibv_cq* cq_ = nullptr;
    ibv_qp* qp_ = nullptr;
    std::vector<uint8_t> ring_, staging_, msgs_;
    ibv_mr* ring_mr_ = nullptr;
    ibv_mr* staging_mr_ = nullptr;
    ibv_mr* msgs_mr_ = nullptr;
    uint32_t psn_ = 0;
    uint16_t path_mtu_ = 0;
    bool connected_ = false;
    uint64_t conn_id_ = 0;
    ProcessId local_pid_, peer_pid_;
    RemoteQp remote_;

    // Sending: bytes written into the peer's ring, and what the peer says it has consumed.
    uint64_t sent_ = 0;
    uint64_t peer_consumed_ = 0;
    uint64_t msgs_sent_ = 0;        // SENDs posted in all (each uses one of the peer's receives)
    uint64_t peer_recvs_posted_ = kRecvDepth;
    std::vector<uint8_t> send_buf_busy_;   // per message buffer
    std::vector<int> send_buf_staging_;    // the staging slot a data message frees, or -1
    std::vector<uint8_t> staging_busy_;
    uint32_t sends_in_flight_ = 0;
    bool fin_sent_ = false;

    // Receiving: bytes the peer has announced, bytes the reader took, what we last told the peer.
    uint64_t arrived_ = 0;
    uint64_t consumed_ = 0;
    uint64_t recvs_posted_ = 0;
    uint64_t consumed_reported_ = 0;
    uint64_t recvs_reported_ = 0;
    bool peer_fin_ = false;

    std::mutex mu_;                      // all of the above, once connected
    std::atomic<bool> cancelled_{false};  // cancel(): every call throws from now on
};

}  // namespace fedgate
