// The digest-checked stream: seeded generator, SHA-256 through OpenSSL's EVP, one verdict each way.
#include "client/src/digest_stream.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "proto/resolve_wire.hpp"

namespace fedgate {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kChunk = 1 << 20;
constexpr uint8_t kVerdictMatch = 0;
constexpr uint8_t kVerdictMismatch = 1;

class Hasher {
public:
    Hasher() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
        if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
            throw std::runtime_error("SHA-256: cannot initialise OpenSSL's digest");
    }
    void update(const uint8_t* p, std::size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
    Sha256 finish() {
        Sha256 d{};
        unsigned len = 0;
        EVP_DigestFinal_ex(ctx_.get(), d.data(), &len);
        return d;
    }

private:
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

// splitmix64: fast, and the same bytes for the same seed on every machine.
class ByteSource {
public:
    explicit ByteSource(uint64_t seed) : state_(seed) {}
    void fill(uint8_t* p, std::size_t n) {
        for (std::size_t i = 0; i < n; i += 8) {
            uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            z ^= z >> 31;
            std::memcpy(p + i, &z, std::min<std::size_t>(8, n - i));
        }
    }

private:
    uint64_t state_;
};

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::string hex(const Sha256& d) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    for (uint8_t b : d) {
        s += kDigits[b >> 4];
        s += kDigits[b & 15];
    }
    return s;
}

StreamResult send_digest_stream(Connection& c, uint64_t bytes, uint64_t seed) {
    StreamResult r;
    const auto t0 = Clock::now();
    try {
        uint8_t len[8];
        store_be64(len, bytes);
        c.send_all(len);
        Hasher h;
        ByteSource src(seed);
        std::vector<uint8_t> chunk(std::min<uint64_t>(bytes, kChunk));
        for (uint64_t left = bytes; left > 0;) {
            const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(left, chunk.size()));
            src.fill(chunk.data(), n);
            h.update(chunk.data(), n);
            c.send_all({chunk.data(), n});
            left -= n;
        }
        r.local_digest = h.finish();
        c.send_all(r.local_digest);
        std::array<uint8_t, 33> verdict{};
        if (!c.recv_exact(verdict)) {
            r.error = "the receiver closed the connection before its verdict";
            return r;
        }
        std::memcpy(r.peer_digest.data(), verdict.data(), 32);
        r.bytes = bytes;
        r.digest_ok = r.peer_digest == r.local_digest && verdict[32] == kVerdictMatch;
        c.shutdown_send();
    } catch (const ConnectionError& e) {
        r.error = e.what();
    }
    r.seconds = since(t0);
    return r;
}

StreamResult receive_digest_stream(Connection& c) {
    StreamResult r;
    const auto t0 = Clock::now();
    try {
        uint8_t len[8];
        if (!c.recv_exact(len)) {
            r.error = "the sender closed the connection before the length";
            return r;
        }
        const uint64_t bytes = load_be64(len);
        Hasher h;
        std::vector<uint8_t> chunk(std::min<uint64_t>(std::max<uint64_t>(bytes, 1), kChunk));
        for (uint64_t left = bytes; left > 0;) {
            const std::size_t want = static_cast<std::size_t>(std::min<uint64_t>(left, chunk.size()));
            const std::size_t n = c.recv_some({chunk.data(), want});
            if (n == 0) {
                r.error = "the sender closed the connection after " + std::to_string(bytes - left) + " of " +
                          std::to_string(bytes) + " bytes";
                return r;
            }
            h.update(chunk.data(), n);
            left -= n;
        }
        r.local_digest = h.finish();
        if (!c.recv_exact(r.peer_digest)) {
            r.error = "the sender closed the connection before its digest";
            return r;
        }
        r.bytes = bytes;
        r.digest_ok = r.peer_digest == r.local_digest;
        std::array<uint8_t, 33> verdict{};
        std::memcpy(verdict.data(), r.local_digest.data(), 32);
        verdict[32] = r.digest_ok ? kVerdictMatch : kVerdictMismatch;
        c.send_all(verdict);
        c.shutdown_send();
    } catch (const ConnectionError& e) {
        r.error = e.what();
    }
    r.seconds = since(t0);
    return r;
}

}  // namespace fedgate
