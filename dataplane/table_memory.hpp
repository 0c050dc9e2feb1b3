// Memory for the data plane's large lookup tables (NAT sessions and their index, the resolution
// cache's buckets and entries): 2 MB aligned and advised to transparent huge pages when large, so
// that lookups spread over megabytes do not miss the TLB on most of them.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace fedgate {

// `bytes` of uninitialised memory, 64-byte aligned; from 2 MB up, 2 MB aligned and advised to
// transparent huge pages (MADV_HUGEPAGE) before anything touches it. Throws std::bad_alloc.
void* allocate_table_memory(std::size_t bytes);
void release_table_memory(void* p);

// A fixed array of value-initialised T, allocated once. Large ones are 2 MB aligned and advised to
// transparent huge pages before their first touch: a million sessions' hot lines are 64 MB (and their
// index 32 MB) that lookups reach at random, and 4 KB pages would add a TLB miss to most of them.
template <typename T>
class FixedArray {
public:
    FixedArray() = default;
    explicit FixedArray(std::size_t n) : p_(static_cast<T*>(allocate(n * sizeof(T)))), n_(n) {
        for (std::size_t i = 0; i < n; ++i) new (p_ + i) T();
    }
    FixedArray(FixedArray&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
    FixedArray& operator=(FixedArray&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    ~FixedArray() { release(p_); }
    T& operator[](std::size_t i) { return p_[i]; }
    const T& operator[](std::size_t i) const { return p_[i]; }
    T* data() { return p_; }
    const T* data() const { return p_; }
    std::size_t size() const { return n_; }

private:
    static_assert(std::is_trivially_destructible_v<T>);
    static void* allocate(std::size_t bytes);  // throws std::bad_alloc
    static void release(void* p);
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

template <typename T>
void* FixedArray<T>::allocate(std::size_t bytes) { return allocate_table_memory(bytes); }
template <typename T>
void FixedArray<T>::release(void* p) { release_table_memory(p); }

}  // namespace fedgate
