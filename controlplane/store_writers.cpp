#include "controlplane/store_writers.hpp"

#include <chrono>
#include <exception>
#include <utility>

namespace fedgate {

StoreWriters::StoreWriters(std::vector<DirectoryStore*> stores, std::function<void()> wake)
    : wake_(std::move(wake)), idle_(stores.size()) {
    threads_.reserve(stores.size());
    for (DirectoryStore* s : stores) threads_.emplace_back([this, s] { run(s); });
}

StoreWriters::~StoreWriters() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
}

std::size_t StoreWriters::idle() const {
    std::lock_guard lk(mu_);
    return idle_ - jobs_.size();
}

bool StoreWriters::submit(uint64_t id, std::vector<DirectoryStore::Op> ops) {
    {
        std::lock_guard lk(mu_);
        if (idle_ <= jobs_.size()) return false;
        jobs_.push_back({id, std::move(ops)});
    }
    cv_.notify_one();
    return true;
}

std::vector<StoreWriters::Done> StoreWriters::take_done() {
    std::lock_guard lk(mu_);
    return std::exchange(done_, {});
}

StoreWriters::Done StoreWriters::write(DirectoryStore& store, std::span<const DirectoryStore::Op> ops, uint64_t id) {
    Done d{id, std::nullopt, 0};
    const auto t0 = std::chrono::steady_clock::now();
    try {
        store.write(ops);
    } catch (const std::exception& e) {
        d.error = e.what();
    }
    d.write_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
    return d;
}

void StoreWriters::run(DirectoryStore* store) {
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left to write
        Job job = std::move(jobs_.front());
        jobs_.pop_front();
        --idle_;
        lk.unlock();
        Done d = write(*store, job.ops, job.id);
        lk.lock();
        done_.push_back(std::move(d));
        ++idle_;
        lk.unlock();
        if (wake_) wake_();
        lk.lock();
    }
}

}  // namespace fedgate
