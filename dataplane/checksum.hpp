// Incremental Internet checksum update (RFC 1624, eqn. 3): when a 16-bit word of a checksummed
// header changes from `old_word` to `new_word`, the checksum changes without re-reading the data.
// The NAT rewrites build their per-session deltas from the same arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fedgate {

// All values in the same byte order (whatever order the words are stored in).
// Three 16-bit terms: a sum such as 0x1ffff is 0x10000 after one fold, so it takes two.
constexpr uint16_t checksum_adjust(uint16_t checksum, uint16_t old_word, uint16_t new_word) {
    uint32_t sum = static_cast<uint16_t>(~checksum) + static_cast<uint32_t>(static_cast<uint16_t>(~old_word)) + new_word;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
}

// One's-complement accumulation of word changes, folded to 16 bits: the delta for checksum_add.
class ChecksumDelta {
public:
    void change(uint16_t old_word, uint16_t new_word) { sum_ += static_cast<uint16_t>(~old_word) + uint32_t{new_word}; }
    void change32(uint32_t old_value, uint32_t new_value) {  // both 16-bit halves, in memory order
        change(static_cast<uint16_t>(old_value), static_cast<uint16_t>(new_value));
        change(static_cast<uint16_t>(old_value >> 16), static_cast<uint16_t>(new_value >> 16));
    }
    void add(uint16_t delta) { sum_ += delta; }
    uint16_t folded() const {
        uint32_t s = sum_;
        while (s >> 16) s = (s & 0xffff) + (s >> 16);
        return static_cast<uint16_t>(s);
    }

private:
    uint32_t sum_ = 0;
};

// Applies a folded delta to a stored checksum. Two 16-bit terms sum to at most 0x1fffe: one
// end-around fold leaves at most 0xffff (a second, as checksum_adjust's three terms need, never
// changes anything here and cost three instructions on each of a forwarded packet's two checksums).
constexpr uint16_t checksum_add(uint16_t checksum, uint16_t delta) {
    uint32_t sum = static_cast<uint16_t>(~checksum) + uint32_t{delta};
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
}

// A 16-bit field's value as it sits in memory (network order) read as a host integer: what an
// in-memory-order sum such as rte_raw_cksum adds for it. A constant-foldable swap, not DPDK's.
constexpr uint16_t stored16(uint16_t host_value) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return static_cast<uint16_t>(host_value << 8 | host_value >> 8);
#else
    return host_value;
#endif
}

// A 64-bit field's value as stored (network order), summed as an in-memory-order sum adds its
// four 16-bit words (unfolded).
constexpr uint32_t stored64_sum(uint64_t host_value) {
    return uint32_t{stored16(static_cast<uint16_t>(host_value >> 48))} +
           stored16(static_cast<uint16_t>(host_value >> 32)) + stored16(static_cast<uint16_t>(host_value >> 16)) +
           stored16(static_cast<uint16_t>(host_value));
}

// Folds an in-memory-order one's-complement sum that fits in 32 bits to 16 bits: the first fold
// leaves at most 0x1fffe, which the second takes to at most 0xffff.
constexpr uint16_t fold_sum32(uint32_t sum) {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

// Folds an in-memory-order one's-complement sum (any width) to 16 bits: to 32 bits first (the
// first fold leaves at most 0x1fffffffe, which the second takes to at most 0xffffffff).
constexpr uint16_t fold_sum(uint64_t sum) {
    sum = (sum & 0xffffffff) + (sum >> 32);
    sum = (sum & 0xffffffff) + (sum >> 32);
    return fold_sum32(static_cast<uint32_t>(sum));
}

// A 32-bit field's two 16-bit halves summed (unfolded): what an in-memory-order sum adds for an
// address kept in network order.
constexpr uint32_t halves_sum(uint32_t v) { return (v & 0xffff) + (v >> 16); }

// The IPv4 pseudo-header's in-memory-order sum for a TCP or UDP segment of `l4_len` bytes:
// addresses as stored (network order), computed from the values, so nothing is read back from
// a header just written (a narrow store read back by a wider load stalls on store forwarding).
constexpr uint32_t pseudo_header_sum(uint32_t src, uint32_t dst, uint8_t proto, uint16_t l4_len) {
    return halves_sum(src) + halves_sum(dst) + stored16(proto) + stored16(l4_len);
}

// The in-memory-order one's-complement sum of `len` bytes, unfolded: fold_sum() of it is what
// rte_raw_cksum gives (a 32-bit word is its two 16-bit halves modulo 0xffff, the modulus the fold
// works in; an odd last byte counts as that byte followed by a zero, as DPDK counts it). 32 bits at
// a time: on the short datagrams the lcore checks, DPDK's loop of 16-bit words (and the vector
// set-up the compiler gives it) was an eighth of a cache hit's time in `perf`.
inline uint64_t raw_sum(const uint8_t* p, std::size_t len) {
    uint64_t sum = 0;
    std::size_t i = 0;
    // Unrolled whole where `len` is a constant (a resolve request's 36 bytes: 9 words, a loop GCC
    // left rolled: its counting was half of the sum's instructions).
#pragma GCC unroll 16
    for (; i + 4 <= len; i += 4) {
        uint32_t w;
        std::memcpy(&w, p + i, 4);
        sum += w;
    }
    if (i + 2 <= len) {
        uint16_t w;
        std::memcpy(&w, p + i, 2);
        sum += w;
        i += 2;
    }
    if (i < len) {
        uint16_t w = 0;
        std::memcpy(&w, p + i, 1);
        sum += w;
    }
    return sum;
}

// raw_sum() of a span whose length is fixed: the 20 bytes of an IPv4 header without options, the
// 44 of a resolve request's UDP datagram with the IPv4 addresses in front of it (the
// pseudo-header's part that varies). On x86-64 a chain of 64-bit adds with carry, the carry out
// added back in (the sum is then one's complement modulo 2^64 - 1, of which 0xffff is a factor, so
// fold_sum() gives the same; and it is 0 only when every byte is): 5 and 8 instructions where the
// 32-bit words of raw_sum() take 10 and 22. A last 32-bit word below 2^32 leaves no second carry:
// a carry out of its add leaves a sum below 2^32.
template <std::size_t N>
inline uint64_t raw_sum_fixed(const uint8_t* p) {
    static_assert(N == 20 || N == 44, "a chain is written out for 20 and 44 bytes");
#if defined(__x86_64__) && defined(__GNUC__)
    uint64_t sum, tail;
    // The span as an input operand too, so that the compiler orders the asm after stores to it.
    if constexpr (N == 20) {
        asm("movq (%[p]), %[sum]\n\t"
            "movl 16(%[p]), %k[tail]\n\t"
            "addq 8(%[p]), %[sum]\n\t"
            "adcq %[tail], %[sum]\n\t"
            "adcq $0, %[sum]"
            : [sum] "=&r"(sum), [tail] "=&r"(tail)
            : [p] "r"(p), "m"(*reinterpret_cast<const uint8_t(*)[N]>(p))
            : "cc");
    } else {
        asm("movq (%[p]), %[sum]\n\t"
            "movl 40(%[p]), %k[tail]\n\t"
            "addq 8(%[p]), %[sum]\n\t"
            "adcq 16(%[p]), %[sum]\n\t"
            "adcq 24(%[p]), %[sum]\n\t"
            "adcq 32(%[p]), %[sum]\n\t"
            "adcq %[tail], %[sum]\n\t"
            "adcq $0, %[sum]"
            : [sum] "=&r"(sum), [tail] "=&r"(tail)
            : [p] "r"(p), "m"(*reinterpret_cast<const uint8_t(*)[N]>(p))
            : "cc");
    }
    return sum;
#else
    return raw_sum(p, N);
#endif
}

// fold_sum(sum) == 0xffff (a checksummed span verifies), without folding: the folds keep a sum's
// value modulo 0xffff (2^16 = 1 modulo 0xffff) and take a nonzero sum to 1..0xffff, of which only
// 0xffff is 0 modulo 0xffff. Divisibility by the odd 0xffff as one multiply and a compare: times
// 0xffff's inverse modulo 2^64, exactly the multiples of 0xffff land at or below (2^64 - 1) / 0xffff
// (the multiple q * 0xffff goes to q, and the map is one to one). Written out, not `sum % 0xffff`:
// GCC chose a 64-bit `div` for that in some functions (a cache hit's request check: a sixth of
// that function's samples in `perf`, though the out-of-order core hid it from the throughput).
constexpr uint64_t kInverseOfFfff = 0xfffefffefffeffffull;  // 0xffff * this == 1 (mod 2^64)
constexpr uint64_t kMultiplesOfFfffBelow = UINT64_MAX / 0xffff;
static_assert(0xffffull * kInverseOfFfff == 1);
constexpr bool sums_to_ones(uint64_t sum) { return sum != 0 && sum * kInverseOfFfff <= kMultiplesOfFfffBelow; }

// True when a 20-byte IPv4 header (no options) sums to all ones, checksum included (the test is
// symmetric: the words may be summed in whatever order they are stored).
inline bool ipv4_header20_ok(const uint8_t* ip) { return sums_to_ones(raw_sum_fixed<20>(ip)); }

}  // namespace fedgate
