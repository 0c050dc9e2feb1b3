// Wire formats of the resolution service: process IDs, DMA address records and the messages that
// compute processes and gateways exchange over UDP. DPDK-free: the data plane, the control plane,
// the node client library and the tests share these exact definitions.
//
// Every message is one UDP datagram to (or from) a gateway's resolution port:
//   MsgHeader | body | [32-byte HMAC-SHA256 trailer, peer messages only]
// Multi-byte fields are big-endian (network order); the packed structs hold raw bytes and the
// encode/decode functions below do the conversion, so no caller ever reads a wire field directly.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fedgate {

inline constexpr uint16_t kDefaultResolvePort = 7410;

// ---------------------------------------------------------------------------------------------
// Process IDs: party (16) | node (16) | local (32). Party 0 means "owner unknown".

struct ProcessId {
    uint64_t value = 0;

    static constexpr ProcessId make(uint16_t party, uint16_t node, uint32_t local) {
        return {uint64_t{party} << 48 | uint64_t{node} << 32 | local};
    }
    constexpr uint16_t party() const { return static_cast<uint16_t>(value >> 48); }
    constexpr uint16_t node() const { return static_cast<uint16_t>(value >> 32); }
    constexpr uint32_t local() const { return static_cast<uint32_t>(value); }
    constexpr ProcessId with_party(uint16_t p) const { return make(p, node(), local()); }
    constexpr bool operator==(const ProcessId&) const = default;
    // A home among 2^bits places of a table (bits 1..63): Fibonacci hashing, the top bits of the ID
    // times 2^64 / phi. IDs come in runs (a node's locals one after another, nodes and parties in the
    // upper words), and the top bits of the product spread a run evenly; the middle bits the tables
    // took before did not (65,536 sequential locals in 131,072 buckets: 15,064 of them used, chains
    // of up to 5, 2.8 entries walked a hit; top bits: every one in a bucket of its own).
    constexpr std::size_t home(unsigned bits) const {
        return static_cast<std::size_t>((value * 0x9e3779b97f4a7c15ull) >> (64 - bits));
    }
};

// "PARTY.NODE.LOCAL" (decimal, each within its width) or "0x" followed by 1-16 hex digits.
std::optional<ProcessId> parse_process_id(std::string_view s);
std::string format_process_id(ProcessId id);  // always the dotted form

// ---------------------------------------------------------------------------------------------
// DMA address records.

enum class Transport : uint8_t { roce_v2 = 1, tcp = 2 };
const char* transport_name(Transport t);
std::optional<Transport> parse_transport(std::string_view s);

// The record in host form. `ipv4` is host byte order.
struct DmaAddress {
    ProcessId pid;
    uint32_t epoch = 0;  // changes when the process restarts
    Transport transport = Transport::tcp;
    uint8_t flags = 0;
    std::array<uint8_t, 16> gid{};
    uint32_t qpn = 0;  // 24 bits used
    uint16_t mtu = 0;
    uint32_t ipv4 = 0;
    uint16_t port = 0;
    uint32_t ttl_s = 0;  // how long a peer may cache it when it learns it from a query answer
    bool operator==(const DmaAddress&) const = default;
};

inline constexpr uint32_t kMaxQpn = 0xffffff;

#pragma pack(push, 1)
struct DmaAddressWire {
    uint8_t pid[8];
    uint8_t epoch[4];
    uint8_t transport;
    uint8_t flags;
    uint8_t mtu[2];
    uint8_t gid[16];
    uint8_t qpn[4];
    uint8_t ipv4[4];
    uint8_t port[2];
    uint8_t reserved[2];
    uint8_t ttl_s[4];
};
#pragma pack(pop)
static_assert(sizeof(DmaAddressWire) == 48);

void encode(const DmaAddress& a, DmaAddressWire& w);
// Rejects an unknown transport, a QP number over 24 bits and non-zero reserved bytes.
std::optional<DmaAddress> decode(const DmaAddressWire& w);

// ---------------------------------------------------------------------------------------------
// Messages.

inline constexpr uint16_t kMsgMagic = 0x4647;  // "FG"
inline constexpr uint8_t kMsgVersion = 1;
inline constexpr std::size_t kMacLen = 32;  // HMAC-SHA256, untruncated
// Largest message body: keeps every datagram within a 1500-byte MTU (20 IPv4 + 8 UDP + header + MAC).
inline constexpr std::size_t kMaxBody = 1400;

enum class MsgType : uint8_t {
    // Compute process -> its gateway (internal port). No MAC: the private network is the boundary.
    reg = 1,         // RegisterBody
    heartbeat = 2,   // ProcessRefBody
    deregister = 3,  // ProcessRefBody
    resolve = 4,     // ResolveBody
    // Gateway -> compute process.
    reg_reply = 5,      // RegReplyBody
    resolve_reply = 6,  // ResolveReplyBody
    // Connection handshake (conn_wire.hpp), between a compute process and its gateway, both ways:
    // the initiator sends REQ and RTU and receives REP; the target receives REQ and RTU, sends REP.
    conn_req = 7,  // ConnBody
    conn_rep = 8,  // ConnBody
    conn_rtu = 9,  // ConnBody
    // Gateway <-> gateway (external port). Every one carries a MAC.
    query = 16,     // QueryBody
    answer = 17,    // AnswerBody
    announce = 18,  // StreamBody + DmaAddressWire[count]
    withdraw = 19,  // StreamBody + ProcessRefBody[count]
    ack = 20,       // AckBody
    sync = 21,      // SyncBody
    hs_req = 22,    // ConnBody: the handshake relayed from gateway to gateway
    hs_rep = 23,    // ConnBody
    hs_rtu = 24,    // ConnBody
};
constexpr bool is_peer_message(MsgType t) { return static_cast<uint8_t>(t) >= 16; }
const char* msg_type_name(MsgType t);

#pragma pack(push, 1)
struct MsgHeader {
    uint8_t magic[2];
    uint8_t version;
    uint8_t type;
    uint8_t sender_party[2];  // peer messages: the sending gateway's party; otherwise 0
    uint8_t body_len[2];
    // Peer messages: the sender's anti-replay sequence (nanoseconds since the epoch, strictly
    // increasing per sender and channel). Client messages: the request ID the reply echoes.
    uint8_t seq[8];
    // Peer messages: which of the sender's threads stamped it, each with its own sequence and the
    // receiver's own replay window: 0 data-plane worker 0, 1 control threads, 1 + w worker w >= 1.
    uint8_t channel;
    // Peer messages: the ID of the sender's key the MAC was made with (1-255), so a receiver that
    // holds two keys of the peer during a rotation checks one MAC, not two. Client messages: 0.
    uint8_t key_id;
    uint8_t reserved[2];
};
#pragma pack(pop)
static_assert(sizeof(MsgHeader) == 20);
inline constexpr std::size_t kKeyIdOffset = offsetof(MsgHeader, key_id);
static_assert(kKeyIdOffset == 17);

struct Header {
    MsgType type = MsgType::reg;
    uint16_t sender_party = 0;
    uint16_t body_len = 0;
    uint64_t seq = 0;
    uint8_t channel = 0;
    uint8_t key_id = 0;  // peer messages: written by PeerKeys::seal, whatever is given here
};

void encode(const Header& h, MsgHeader& w);

enum class WireError : uint8_t { ok, truncated, bad_magic, bad_version, bad_type, bad_length, bad_body };
const char* wire_error_name(WireError e);

// Checks magic, version, type and that the datagram holds exactly header + body (+ MAC for peer
// messages). On success `body` spans the body and `mac` the trailer (empty for client messages).
struct ParsedMsg {
    Header header;
    std::span<const uint8_t> body;
    std::span<const uint8_t> mac;
    std::span<const uint8_t> authenticated;  // header + body: what the MAC covers
};
WireError parse_message(std::span<const uint8_t> datagram, ParsedMsg& out);

// Status codes of replies and answers.
enum class ResolveStatus : uint8_t {
    ok = 0,
    not_found = 1,      // every party that could hold it says it does not
    unreachable = 2,    // the owner's gateway (or every gateway) did not answer in time
    rate_limited = 3,   // too many broadcasts from this requester, or in total
    bad_request = 4,    // malformed request (e.g. target ID 0)
    busy = 5,           // no room to keep the query pending
};
const char* resolve_status_name(ResolveStatus s);

enum class RegStatus : uint8_t {
    ok = 0,
    wrong_party = 1,     // the ID claims another party
    address_mismatch = 2,  // the record's address is not the sender's
    unknown = 3,         // heartbeat/deregister for a process the gateway does not hold
    stale_epoch = 4,     // an older epoch than the one registered
    bad_record = 5,      // malformed record (unknown transport, zero ID, ...)
    full = 6,            // the directory is full
    store_unavailable = 7,  // a gateway group's store did not take the change; try again
};
inline constexpr RegStatus kLastRegStatus = RegStatus::store_unavailable;
const char* reg_status_name(RegStatus s);

// Where an answer came from; tells tests and people which path served them.
enum class AnswerSource : uint8_t { cache = 0, local = 1, directed = 2, broadcast = 3, negative_cache = 4 };
const char* answer_source_name(AnswerSource s);

enum class QueryMode : uint8_t { directed = 0, broadcast = 1 };

#pragma pack(push, 1)
struct RegisterBody {
    DmaAddressWire record;
};
struct ProcessRefBody {
    uint8_t pid[8];
    uint8_t epoch[4];
};
struct ResolveBody {
    uint8_t target[8];
};
struct RegReplyBody {
    uint8_t status;
    uint8_t reserved[3];
    uint8_t pid[8];
    uint8_t epoch[4];
    uint8_t heartbeat_ms[4];  // how often the gateway wants heartbeats
};
struct ResolveReplyBody {
    uint8_t status;
    uint8_t source;
    uint8_t reserved[2];
    uint8_t target[8];        // as asked (may be party 0)
    DmaAddressWire record;    // valid when status == ok
};
struct QueryBody {
    uint8_t query_id[8];
    uint8_t target[8];
    uint8_t mode;
    uint8_t reserved[3];
};
struct AnswerBody {
    uint8_t query_id[8];
    uint8_t target[8];  // as queried
    uint8_t found;      // 1: record follows; 0: not here
    uint8_t reserved[3];
    DmaAddressWire record;
};
// Announce and withdraw ride a reliable stream from one gateway to one peer: go-back-N on `seq`,
// cumulative ACKs. `stream` changes whenever the sender starts over (restart, or the receiver
// asked for a reset); the first message of a stream (seq 1) carries kStreamSnapshot and tells the
// receiver to forget every record it holds from that sender.
struct StreamBody {
    uint8_t stream[8];
    uint8_t seq[8];
    uint8_t count[2];
    uint8_t flags;
    uint8_t reserved;
};
struct AckBody {
    uint8_t stream[8];  // the stream acknowledged (the receiver of AckBody is its sender)
    uint8_t acked[8];   // every message up to and including this seq has been applied
    uint8_t flags;      // kAckReset: "I do not know this stream: start over"
    uint8_t reserved[3];
};
struct SyncBody {
    uint8_t stream[8];
    uint8_t last_seq[8];  // the last seq sent on the stream
    uint8_t records[4];   // how many records the sender holds locally
};
#pragma pack(pop)
static_assert(sizeof(RegisterBody) == 48);
static_assert(sizeof(ProcessRefBody) == 12);
static_assert(sizeof(ResolveBody) == 8);
static_assert(sizeof(RegReplyBody) == 20);
static_assert(sizeof(ResolveReplyBody) == 60);
static_assert(sizeof(QueryBody) == 20);
static_assert(sizeof(AnswerBody) == 68);
static_assert(sizeof(StreamBody) == 20);
static_assert(sizeof(AckBody) == 20);
static_assert(sizeof(SyncBody) == 20);

inline constexpr uint8_t kStreamSnapshot = 0x01;
inline constexpr uint8_t kAckReset = 0x01;
inline constexpr std::size_t kMaxAnnouncePerMsg = (kMaxBody - sizeof(StreamBody)) / sizeof(DmaAddressWire);
inline constexpr std::size_t kMaxWithdrawPerMsg = (kMaxBody - sizeof(StreamBody)) / sizeof(ProcessRefBody);

// Big-endian field access for the byte arrays above. The loads are always inlined: GCC compiles
// each to one load and a byte swap, and had left load_be64 a call in the data plane's hit path.
[[gnu::always_inline]] constexpr uint16_t load_be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
[[gnu::always_inline]] constexpr uint32_t load_be32(const uint8_t* p) {
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
[[gnu::always_inline]] constexpr uint64_t load_be64(const uint8_t* p) {
    return uint64_t{load_be32(p)} << 32 | load_be32(p + 4);
}
constexpr void store_be16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
constexpr void store_be32(uint8_t* p, uint32_t v) {
    store_be16(p, static_cast<uint16_t>(v >> 16));
    store_be16(p + 2, static_cast<uint16_t>(v));
}
constexpr void store_be64(uint8_t* p, uint64_t v) {
    store_be32(p, static_cast<uint32_t>(v >> 32));
    store_be32(p + 4, static_cast<uint32_t>(v));
}

// The body of a message of `type` must be exactly this long; stream messages: at least the
// StreamBody, and then a whole number of entries (checked against `count` by the decoders).
std::size_t fixed_body_size(MsgType t);  // 0 for stream messages

}  // namespace fedgate
