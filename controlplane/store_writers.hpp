// Directory writes into a gateway group's store on threads of their own, several transactions in
// flight at once. A member answers a registration only once the store holds it, so the rate a
// member registers at is the number of registrations in flight over the store's commit latency:
// with one write at a time, a registration that arrives while a write is out waits for it and then
// for its own. With several writers, each burst the driving thread stages goes out at once on an
// idle writer, and etcd commits concurrent transactions together (one raft entry batch, one fsync).
// The driving thread never blocks on the store: it submits, and collects what finished.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/resolution.hpp"

namespace fedgate {

class StoreWriters {
public:
    struct Done {
        uint64_t id = 0;
        std::optional<std::string> error;  // why the store did not take it; nullopt: written
        uint64_t write_us = 0;             // how long the store took to answer
    };
    // One thread per store; `wake` runs on a writer's thread after each write it finished (the
    // driving thread's doorbell).
    StoreWriters(std::vector<DirectoryStore*> stores, std::function<void()> wake);
    ~StoreWriters();  // waits for the writes in flight
    StoreWriters(const StoreWriters&) = delete;
    StoreWriters& operator=(const StoreWriters&) = delete;

    // One write on the calling thread, timed, its exception caught (what each writer does).
    static Done write(DirectoryStore& store, std::span<const DirectoryStore::Op> ops, uint64_t id = 0);

    std::size_t size() const { return threads_.size(); }
    std::size_t idle() const;
    // Gives `ops` to an idle writer; false (nothing taken) when every writer is busy.
    bool submit(uint64_t id, std::vector<DirectoryStore::Op> ops);
    // The writes finished since the last call, in the order they finished.
    std::vector<Done> take_done();

private:
    struct Job {
        uint64_t id = 0;
        std::vector<DirectoryStore::Op> ops;
    };
    void run(DirectoryStore* store);

    std::function<void()> wake_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> jobs_;  // at most idle_ of them
    std::vector<Done> done_;
    std::size_t idle_ = 0;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace fedgate
