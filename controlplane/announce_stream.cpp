// The announce stream: packing, go-back-N sending and in-order receiving.
#include "controlplane/announce_stream.hpp"

#include <algorithm>
#include <cstring>

namespace fedgate {

AnnounceSender::AnnounceSender(uint32_t window, uint32_t rto_ms, uint32_t max_rto_ms)
    : window_(std::max<uint32_t>(window, 1)),
      base_rto_ms_(std::max<uint32_t>(rto_ms, 1)),
      max_rto_ms_(std::max(max_rto_ms, rto_ms)),
      rto_ms_(base_rto_ms_) {}

void AnnounceSender::restart(uint64_t stream, const std::vector<DmaAddress>& snapshot, uint64_t now_ms) {
    stream_ = stream;
    next_seq_ = 1;
    acked_ = 0;
    sent_upto_ = 0;
    behind_acks_ = 0;
    started_ms_ = now_ms;
    last_send_ms_ = now_ms;
    rto_ms_ = base_rto_ms_;
    msgs_.clear();
    queued_.clear();
    ++stats_.restarts;
    for (const DmaAddress& r : snapshot) queued_.push_back({false, r});
    pack();
    if (msgs_.empty()) {
        // An empty snapshot still has to reach the peer: it clears what the peer holds from us.
        std::vector<uint8_t> body(sizeof(StreamBody), 0);
        StreamBody sb{};
        store_be64(sb.stream, stream_);
        store_be64(sb.seq, next_seq_);
        sb.flags = kStreamSnapshot;
        std::memcpy(body.data(), &sb, sizeof sb);
        msgs_.push_back({next_seq_++, MsgType::announce, std::move(body)});
    }
}

void AnnounceSender::announce(const DmaAddress& record) { queued_.push_back({false, record}); }

void AnnounceSender::withdraw(ProcessId pid, uint32_t epoch) {
    DmaAddress r;
    r.pid = pid;
    r.epoch = epoch;
    queued_.push_back({true, r});
}

void AnnounceSender::pack() {
    std::size_t i = 0;
    while (i < queued_.size()) {
        const bool withdraw = queued_[i].withdraw;
        const std::size_t per = withdraw ? kMaxWithdrawPerMsg : kMaxAnnouncePerMsg;
        const std::size_t entry = withdraw ? sizeof(ProcessRefBody) : sizeof(DmaAddressWire);
        std::size_t n = 0;
        while (i + n < queued_.size() && n < per && queued_[i + n].withdraw == withdraw) ++n;
        std::vector<uint8_t> body(sizeof(StreamBody) + n * entry);
        StreamBody sb{};
        store_be64(sb.stream, stream_);
        store_be64(sb.seq, next_seq_);
        store_be16(sb.count, static_cast<uint16_t>(n));
        sb.flags = next_seq_ == 1 ? kStreamSnapshot : 0;
        std::memcpy(body.data(), &sb, sizeof sb);
        uint8_t* p = body.data() + sizeof sb;
        for (std::size_t k = 0; k < n; ++k, p += entry) {
            const DmaAddress& r = queued_[i + k].record;
            if (withdraw) {
                ProcessRefBody ref{};
                store_be64(ref.pid, r.pid.value);
                store_be32(ref.epoch, r.epoch);
                std::memcpy(p, &ref, sizeof ref);
            } else {
                DmaAddressWire w;
                encode(r, w);
                std::memcpy(p, &w, sizeof w);
            }
        }
        (withdraw ? stats_.records_withdrawn : stats_.records_announced) += n;
        msgs_.push_back({next_seq_++, withdraw ? MsgType::withdraw : MsgType::announce, std::move(body)});
        i += n;
    }
    queued_.clear();
}

void AnnounceSender::poll(uint64_t now_ms, const Send& send) {
    if (stream_ == 0) return;
    pack();
    if (msgs_.empty()) return;
    if (sent_upto_ > acked_ && now_ms >= last_send_ms_ + rto_ms_) {
        // Go back N: everything unacknowledged goes out again.
        sent_upto_ = acked_;
        rto_ms_ = std::min(rto_ms_ * 2, max_rto_ms_);
        ++stats_.retransmits;
    }
    const uint64_t limit = acked_ + window_;
    for (const Message& m : msgs_) {
        if (m.seq > limit) break;
        if (m.seq <= sent_upto_) continue;
        send(m.type, m.body);
        sent_upto_ = m.seq;
        last_send_ms_ = now_ms;
        ++stats_.messages_sent;
    }
}

bool AnnounceSender::on_ack(uint64_t stream, uint64_t acked, uint8_t flags, uint64_t now_ms) {
    if (stream != stream_ || stream_ == 0) return false;  // about a stream we already left
    // Before anything is acknowledged the snapshot's first message is being resent anyway: a peer
    // that missed it and saw a later one will adopt the stream when it arrives. A peer that still
    // refuses the stream after the snapshot has been resent at the longest timeout will not (it
    // took a late copy of an older stream's snapshot for the newer one): start over.
    if ((flags & kAckReset) != 0) return acked_ != 0 || now_ms >= started_ms_ + 2 * uint64_t{max_rto_ms_};
    if (acked < acked_) {
        // The peer holds less of the stream than it once acknowledged: it restarted and took the
        // stream up again from a late copy of its snapshot. Go-back-N never resends what was
        // acknowledged, so only a new stream brings it level; a few in a row, not one reordered ACK.
        return ++behind_acks_ >= kBehindAcksToRestart;
    }
    behind_acks_ = 0;
    if (acked == acked_ || acked > sent_upto_) return false;
    while (!msgs_.empty() && msgs_.front().seq <= acked) msgs_.pop_front();
    acked_ = acked;
    rto_ms_ = base_rto_ms_;
    last_send_ms_ = now_ms;
    return false;
}

SyncBody AnnounceSender::sync_body(uint32_t records) const {
    SyncBody b{};
    store_be64(b.stream, stream_);
    store_be64(b.last_seq, next_seq_ - 1);
    store_be32(b.records, records);
    return b;
}

AnnounceReceiver::Verdict AnnounceReceiver::on_message(uint64_t stream, uint64_t seq, uint8_t flags) {
    if (stream == 0) return Verdict::unknown_stream;  // no sender uses 0: it means "none yet"
    if (stream != stream_) {
        if (std::find(left_.begin(), left_.end(), stream) != left_.end()) return Verdict::duplicate;
        if (seq == 1 && (flags & kStreamSnapshot) != 0) {
            if (stream_ != 0) {
                left_[next_left_] = stream_;
                next_left_ = (next_left_ + 1) % left_.size();
            }
            stream_ = stream;
            applied_ = 1;
            return Verdict::apply_snapshot;
        }
        return Verdict::unknown_stream;
    }
    if (seq <= applied_) return Verdict::duplicate;
    if (seq != applied_ + 1) return Verdict::gap;
    applied_ = seq;
    return Verdict::apply;
}

AnnounceReceiver::Verdict AnnounceReceiver::on_sync(uint64_t stream, uint64_t last_seq) const {
    if (stream != stream_ || stream == 0) return Verdict::unknown_stream;
    return applied_ < last_seq ? Verdict::gap : Verdict::duplicate;
}

const char* receiver_verdict_name(AnnounceReceiver::Verdict v) {
    switch (v) {
    case AnnounceReceiver::Verdict::apply: return "apply";
    case AnnounceReceiver::Verdict::apply_snapshot: return "apply_snapshot";
    case AnnounceReceiver::Verdict::duplicate: return "duplicate";
    case AnnounceReceiver::Verdict::gap: return "gap";
    case AnnounceReceiver::Verdict::unknown_stream: return "unknown_stream";
    }
    return "?";
}

}  // namespace fedgate
