// The announce stream from this gateway to one peer: our local records and their withdrawals, in
// order, over UDP, never silently lost. Go-back-N with cumulative ACKs: messages carry a stream ID
// and a sequence number from 1; the first one of a stream is a snapshot that tells the peer to
// forget what it had from us. A peer that restarted does not know the stream and asks for a reset;
// we then start a new stream with a fresh snapshot. Pure: time is passed in, bytes go to a callback.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "proto/resolve_wire.hpp"

namespace fedgate {

struct AnnounceSenderStats {
    uint64_t messages_sent = 0, retransmits = 0, records_announced = 0, records_withdrawn = 0, restarts = 0;
};

class AnnounceSender {
public:
    using Send = std::function<void(MsgType type, const std::vector<uint8_t>& body)>;

    AnnounceSender(uint32_t window, uint32_t rto_ms, uint32_t max_rto_ms = 4000);

    // A new stream, `stream` (random, non-zero), starting with every record of `snapshot`.
    void restart(uint64_t stream, const std::vector<DmaAddress>& snapshot, uint64_t now_ms);
    void announce(const DmaAddress& record);
    void withdraw(ProcessId pid, uint32_t epoch);
    // Sends what the window allows, and on a timeout everything unacknowledged again (doubling the
    // timeout up to max_rto_ms, reset on progress).
    void poll(uint64_t now_ms, const Send& send);
    // Returns true when the caller must restart the stream: the peer asked for a reset (once
    // something was acknowledged, or still after the snapshot was resent for twice the longest
    // timeout), or kept acknowledging less than it once had (it lost the stream's state).
    bool on_ack(uint64_t stream, uint64_t acked, uint8_t flags, uint64_t now_ms);
    static constexpr uint32_t kBehindAcksToRestart = 3;
    SyncBody sync_body(uint32_t records) const;

    uint64_t stream() const { return stream_; }
    uint64_t acked() const { return acked_; }
    uint64_t last_seq() const { return next_seq_ - 1; }
    std::size_t unacked() const { return msgs_.size(); }  // packed, not yet acknowledged
    std::size_t queued() const { return queued_.size(); }  // not yet packed into messages
    const AnnounceSenderStats& stats() const { return stats_; }

private:
    struct Entry {
        bool withdraw;
        DmaAddress record;  // withdraw: pid and epoch only
    };
    struct Message {
        uint64_t seq;
        MsgType type;
        std::vector<uint8_t> body;  // StreamBody header + entries
    };
    void pack();

    uint32_t window_, base_rto_ms_, max_rto_ms_, rto_ms_;
    uint64_t stream_ = 0;
    uint64_t next_seq_ = 1;   // seq the next packed message gets
    uint64_t acked_ = 0;      // every seq up to here is acknowledged
    uint64_t sent_upto_ = 0;  // highest seq sent at least once
    uint64_t last_send_ms_ = 0;
    uint64_t started_ms_ = 0;     // when restart() began the stream
    uint32_t behind_acks_ = 0;    // ACKs in a row below acked_
    std::deque<Message> msgs_;  // seqs acked_+1 .. next_seq_-1
    std::vector<Entry> queued_;
    AnnounceSenderStats stats_;
};

// The receiving end of one peer's stream to us.
class AnnounceReceiver {
public:
    enum class Verdict : uint8_t {
        apply,           // the next message in order: apply it
        apply_snapshot,  // the first message of a new stream: forget the peer's records, then apply
        duplicate,       // seen already: ACK again, change nothing
        gap,             // a message before it is missing: ACK what we have, change nothing
        unknown_stream,  // not a stream we follow: ACK with kAckReset
    };
    Verdict on_message(uint64_t stream, uint64_t seq, uint8_t flags);
    // The peer's keepalive: gap when we miss its tail, unknown_stream when we never saw the stream.
    Verdict on_sync(uint64_t stream, uint64_t last_seq) const;
    uint64_t stream() const { return stream_; }
    uint64_t applied() const { return applied_; }

private:
    uint64_t stream_ = 0;
    uint64_t applied_ = 0;
    // Streams the sender has moved on from: a late copy of one of their snapshots must not take
    // the receiver back.
    std::array<uint64_t, 4> left_{};
    std::size_t next_left_ = 0;
};

const char* receiver_verdict_name(AnnounceReceiver::Verdict v);

}  // namespace fedgate
