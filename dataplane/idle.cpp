// How an idle lcore waits: ppoll on its RX queues' wake descriptors, or a precise sleep.
#include "dataplane/idle.hpp"

#include <poll.h>
#include <rte_ethdev.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <ctime>

#include <rte_interrupts.h>

namespace fedgate {
namespace {

constexpr unsigned long kTimerSlackNs = 1000;

}  // namespace

IdleWaiter::IdleWaiter(std::span<const RxQueueRef> queues, int doorbell) {
    wakeable_ = !queues.empty() && queues.size() < kMaxPollFds;
    for (const RxQueueRef& q : queues) {
        const RxWakeSource s = rx_wake_source(q.port_id, q.queue);
        if (s.fd < 0)
            wakeable_ = false;
        else if (s.interrupt)
            interrupts_.push_back(q);
        else
            fds_.push_back(s.fd);
    }
    if (!wakeable_) {
        fds_.clear();
        interrupts_.clear();
    } else if (doorbell >= 0) {
        doorbell_at_ = static_cast<int>(fds_.size());
        fds_.push_back(doorbell);  // without wake sources the waits are naps, short enough anyway
    }
    // Rx interrupts come through an epoll descriptor of our own, which ppoll watches beside the
    // sockets; rte_epoll_wait then consumes the event the way the interrupt's kind needs.
    if (!interrupts_.empty()) {
        epfd_ = epoll_create1(EPOLL_CLOEXEC);
        bool armed = epfd_ >= 0;
        for (const RxQueueRef& q : interrupts_)
            armed = armed && rte_eth_dev_rx_intr_ctl_q(q.port_id, q.queue, epfd_, RTE_INTR_EVENT_ADD, nullptr) == 0;
        if (armed) {
            fds_.push_back(epfd_);
        } else {
            wakeable_ = false;
            fds_.clear();
        }
    }
    const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack > 0 && prctl(PR_SET_TIMERSLACK, kTimerSlackNs, 0, 0, 0) == 0) saved_slack_ns_ = slack;
}

IdleWaiter::~IdleWaiter() {
    if (epfd_ >= 0) {
        for (const RxQueueRef& q : interrupts_) rte_eth_dev_rx_intr_ctl_q(q.port_id, q.queue, epfd_, RTE_INTR_EVENT_DEL, nullptr);
        ::close(epfd_);
    }
    if (saved_slack_ns_ > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved_slack_ns_), 0, 0, 0);
}

bool IdleWaiter::wait(uint32_t us) {
    const timespec ts{static_cast<time_t>(us / 1'000'000), static_cast<long>(us % 1'000'000) * 1000};
    if (!wakeable_) {
        nanosleep(&ts, nullptr);
        return false;
    }
    for (const RxQueueRef& q : interrupts_) rte_eth_dev_rx_intr_enable(q.port_id, q.queue);
    // At most kMaxPollFds descriptors (checked at construction): on the stack, no allocation.
    pollfd pfds[kMaxPollFds];
    const size_t n = fds_.size();
    for (size_t i = 0; i < n; ++i) pfds[i] = {fds_[i], POLLIN, 0};
    const int ready = ppoll(pfds, n, &ts, nullptr);
    for (const RxQueueRef& q : interrupts_) rte_eth_dev_rx_intr_disable(q.port_id, q.queue);
    doorbell_rang_ = ready > 0 && doorbell_at_ >= 0 && (pfds[doorbell_at_].revents & POLLIN) != 0;
    if (ready <= 0) return false;
    if (epfd_ >= 0 && (pfds[n - 1].revents & POLLIN) != 0) {
        rte_epoll_event ev[8];
        rte_epoll_wait(epfd_, ev, 8, 0);
    }
    return true;
}

}  // namespace fedgate
