// Peer message authentication (HmacKey against RFC 4231 and OpenSSL), the anti-replay window (against
// a reference model), the sequence clock under threads, and the token-bucket rate limiters.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dataplane/peer_auth.hpp"
#include "dataplane/rate_limiter.hpp"
#include "proto/resolve_wire.hpp"

namespace {

using namespace fedgate;
using Bytes = std::vector<uint8_t>;

Bytes bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }
Bytes repeat(uint8_t b, std::size_t n) { return Bytes(n, b); }

Bytes from_hex(std::string_view hex) {
    Bytes out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
    return out;
}

Bytes mac_of(const HmacKey& k, const Bytes& data) {
    Bytes out(kMacLen);
    k.sign(data, out.data());
    return out;
}

Bytes openssl_hmac(const Bytes& key, const Bytes& data) {
    Bytes out(EVP_MAX_MD_SIZE);
    unsigned len = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), out.data(), &len);
    out.resize(len);
    return out;
}

// ---------------------------------------------------------------------------------------------
// HmacKey

struct Rfc4231Case {
    const char* name;
    Bytes key;
    Bytes data;
    const char* hmac_sha256;  // hex; case 5 lists only the first 128 bits
};

std::vector<Rfc4231Case> rfc4231_cases() {
    Bytes key4;
    for (uint8_t b = 0x01; b <= 0x19; ++b) key4.push_back(b);
    return {
        {"1", repeat(0x0b, 20), bytes("Hi There"),
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"2", bytes("Jefe"), bytes("what do ya want for nothing?"),
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {"3", repeat(0xaa, 20), repeat(0xdd, 50), "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {"4", key4, repeat(0xcd, 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {"5", repeat(0x0c, 20), bytes("Test With Truncation"), "a3b6167473100ee06e0c796c2955552b"},
        {"6", repeat(0xaa, 131), bytes("Test Using Larger Than Block-Size Key - Hash Key First"),
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {"7", repeat(0xaa, 131),
         bytes("This is a test using a larger than block-size key and a larger than block-size data. The key "
               "needs to be hashed before being used by the HMAC algorithm."),
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
}

TEST(HmacKey, SignMatchesRfc4231TestVectors) {
    for (const auto& c : rfc4231_cases()) {
        SCOPED_TRACE(std::string("RFC 4231 case ") + c.name);
        const Bytes expect = from_hex(c.hmac_sha256);
        Bytes mac = mac_of(HmacKey(c.key), c.data);
        mac.resize(expect.size());  // case 5: compare the truncated output
        EXPECT_EQ(mac, expect);
    }
}

TEST(HmacKey, VerifyAcceptsTheUntruncatedRfc4231Macs) {
    for (const auto& c : rfc4231_cases()) {
        const Bytes expect = from_hex(c.hmac_sha256);
        if (expect.size() != kMacLen) continue;  // case 5 is truncated: verify wants all 32 bytes
        EXPECT_TRUE(HmacKey(c.key).verify(c.data, expect)) << "case " << c.name;
    }
}

TEST(HmacKey, SignMatchesOpenSslOneShotHmacOnRandomKeysAndLengths) {
    std::mt19937 rng(4231);
    auto random_bytes = [&](std::size_t n) {
        Bytes b(n);
        for (auto& x : b) x = static_cast<uint8_t>(rng());
        return b;
    };
    // Every data length through the first blocks, then random ones up to 3000 bytes.
    for (std::size_t i = 0; i < 600; ++i) {
        const Bytes key = random_bytes(1 + rng() % 200);
        const Bytes data = random_bytes(i < 200 ? i : rng() % 3001);
        SCOPED_TRACE("key " + std::to_string(key.size()) + " bytes, data " + std::to_string(data.size()) + " bytes");
        const HmacKey k(key);
        const Bytes expect = openssl_hmac(key, data);
        ASSERT_EQ(mac_of(k, data), expect);
        ASSERT_TRUE(k.verify(data, expect));
    }
}

TEST(HmacKey, KeysOfBlockSizeAndAroundItMatchOpenSsl) {
    const Bytes data = bytes("block-size boundary");
    for (std::size_t n : {0u, 1u, 63u, 64u, 65u, 128u}) {
        const Bytes key = repeat(0x5a, n);
        EXPECT_EQ(mac_of(HmacKey(key), data), openssl_hmac(key, data)) << n << "-byte key";
    }
}

TEST(HmacKey, SigningTwiceGivesTheSameMacBecauseThePrecomputedStateIsNotConsumed) {
    const HmacKey k(bytes("Jefe"));
    const Bytes data = bytes("what do ya want for nothing?");
    EXPECT_EQ(mac_of(k, data), mac_of(k, data));
    const HmacKey copy = k;
    EXPECT_EQ(mac_of(copy, data), mac_of(k, data));
}

TEST(HmacKey, VerifyRejectsAFlippedBitAnywhereInDataOrMac) {
    const HmacKey k(bytes("peer key of party 2"));
    Bytes data(100);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
    Bytes mac = mac_of(k, data);
    ASSERT_TRUE(k.verify(data, mac));
    for (std::size_t bit = 0; bit < data.size() * 8; ++bit) {
        data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        EXPECT_FALSE(k.verify(data, mac)) << "data bit " << bit;
        data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
    for (std::size_t bit = 0; bit < kMacLen * 8; ++bit) {
        mac[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        EXPECT_FALSE(k.verify(data, mac)) << "mac bit " << bit;
        mac[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
    EXPECT_TRUE(k.verify(data, mac));
}

TEST(HmacKey, VerifyRejectsAMacOfTheWrongLength) {
    const HmacKey k(bytes("key"));
    const Bytes data = bytes("message");
    Bytes mac = mac_of(k, data);
    EXPECT_FALSE(k.verify(data, {}));
    EXPECT_FALSE(k.verify(data, std::span<const uint8_t>(mac).first(kMacLen - 1)));
    EXPECT_FALSE(k.verify(data, std::span<const uint8_t>(mac).first(16)));
    mac.push_back(0);
    EXPECT_FALSE(k.verify(data, mac));
}

TEST(HmacKey, VerifyRejectsAMacMadeWithAnotherKey) {
    const Bytes data = bytes("announce from party 3");
    const Bytes key = bytes("the key of party 3");
    Bytes other = key;
    other.back() ^= 1;
    EXPECT_FALSE(HmacKey(other).verify(data, mac_of(HmacKey(key), data)));
    EXPECT_FALSE(HmacKey(bytes("another key")).verify(data, mac_of(HmacKey(key), data)));
}

// RFC 2104 pads a short key with zeros to the block, so K and K||0x00 are one HMAC key (OpenSSL
// agrees). Harmless with random keys of one fixed length, which is what peer keys should be.
TEST(HmacKey, KeysThatDifferOnlyInTrailingZeroBytesAreTheSameHmacKey) {
    const Bytes data = bytes("announce from party 3");
    const Bytes key = bytes("the key of party 3");
    Bytes padded = key;
    padded.push_back(0);
    EXPECT_TRUE(HmacKey(padded).verify(data, mac_of(HmacKey(key), data)));
    EXPECT_EQ(openssl_hmac(padded, data), openssl_hmac(key, data));
}

TEST(HmacKey, SealWritesTheMacOfEverythingBeforeTheTrailer) {
    const HmacKey k(bytes("seal key"));
    Bytes datagram(60, 0x11);
    std::fill(datagram.end() - kMacLen, datagram.end(), 0);
    k.seal(datagram);
    const Bytes covered(datagram.begin(), datagram.end() - kMacLen);
    EXPECT_EQ(Bytes(datagram.end() - kMacLen, datagram.end()), mac_of(k, covered));
}

TEST(HmacKey, SealLeavesADatagramShorterThanAMacAlone) {
    const HmacKey k(bytes("seal key"));
    Bytes tiny(kMacLen - 1, 0x22);
    k.seal(tiny);
    EXPECT_EQ(tiny, Bytes(kMacLen - 1, 0x22));
    Bytes just_mac(kMacLen, 0);
    k.seal(just_mac);  // covers nothing: the MAC of the empty message
    EXPECT_EQ(just_mac, mac_of(k, {}));
}

TEST(HmacKey, SealedPeerMessageParsesAndVerifiesOverItsAuthenticatedPart) {
    const HmacKey k(bytes("party 2 <-> party 3"));
    Bytes datagram(sizeof(MsgHeader) + sizeof(AckBody) + kMacLen, 0);
    MsgHeader h;
    encode(Header{.type = MsgType::ack, .sender_party = 2, .body_len = sizeof(AckBody), .seq = 1'700'000'000'000'000'000,
                  .channel = 1},
           h);
    std::memcpy(datagram.data(), &h, sizeof h);
    datagram[sizeof(MsgHeader)] = 0x42;  // stream ID, first byte
    k.seal(datagram);

    ParsedMsg m;
    ASSERT_EQ(parse_message(datagram, m), WireError::ok);
    EXPECT_TRUE(k.verify(m.authenticated, m.mac));
    datagram[sizeof(MsgHeader)] ^= 1;
    ASSERT_EQ(parse_message(datagram, m), WireError::ok);
    EXPECT_FALSE(k.verify(m.authenticated, m.mac));
}

// ---------------------------------------------------------------------------------------------
// Key IDs, fingerprints and a peer's two keys

TEST(PeerKeys, AFingerprintIsShortStableAndDiffersBetweenKeys) {
    const Bytes a = repeat(0x11, 32), b = repeat(0x12, 32);
    const std::string fa = key_fingerprint(a);
    EXPECT_EQ(fa.size(), 19u);
    EXPECT_EQ(fa, key_fingerprint(a));
    EXPECT_NE(fa, key_fingerprint(b));
    for (std::size_t i = 0; i < fa.size(); ++i)
        EXPECT_TRUE(i % 5 == 4 ? fa[i] == ':' : std::isxdigit(static_cast<unsigned char>(fa[i])) != 0) << fa;
    // Not the key, nor its plain SHA-256: the first 8 bytes of SHA-256("fedgate peer key\0" || key).
    Bytes input = bytes("fedgate peer key");
    input.push_back(0);
    input.insert(input.end(), a.begin(), a.end());
    uint8_t d[32];
    unsigned len = 0;
    EVP_Digest(input.data(), input.size(), d, &len, EVP_sha256(), nullptr);
    char expect[20];
    std::snprintf(expect, sizeof expect, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
    EXPECT_EQ(fa, expect);
    EXPECT_EQ(derived_key_id(a), 1 + d[8] % 255);
}

TEST(PeerKeys, DerivedIdsAreOneTo255AndSpreadOverKeys) {
    std::set<int> ids;
    for (int i = 0; i < 2000; ++i) {
        Bytes k(32, 0x5c);
        k[0] = static_cast<uint8_t>(i);
        k[1] = static_cast<uint8_t>(i >> 8);
        const uint8_t id = derived_key_id(k);
        EXPECT_NE(id, 0);
        ids.insert(id);
    }
    EXPECT_GT(ids.size(), 200u);
}

TEST(PeerKeys, SealNamesTheCurrentKeyAndFindGivesEitherKeyByItsId) {
    const Bytes cur = repeat(0x21, 32), nxt = repeat(0x22, 32);
    const PeerKeys keys({cur, 5}, PeerKeys::Key{nxt, 6});
    EXPECT_EQ(keys.current_id(), 5);
    EXPECT_EQ(keys.next_id(), 6);
    Bytes d(sizeof(MsgHeader) + sizeof(AckBody) + kMacLen, 0);
    MsgHeader h;
    encode(Header{.type = MsgType::ack, .sender_party = 2, .body_len = sizeof(AckBody), .seq = 1, .channel = 1}, h);
    std::memcpy(d.data(), &h, sizeof h);
    keys.seal(d);
    ParsedMsg m;
    ASSERT_EQ(parse_message(d, m), WireError::ok);
    EXPECT_EQ(m.header.key_id, 5);
    ASSERT_NE(keys.find(5), nullptr);
    EXPECT_TRUE(keys.find(5)->verify(m.authenticated, m.mac));
    EXPECT_TRUE(HmacKey(cur).verify(m.authenticated, m.mac));
    ASSERT_NE(keys.find(6), nullptr);
    EXPECT_FALSE(keys.find(6)->verify(m.authenticated, m.mac));
    EXPECT_EQ(keys.find(0), nullptr);
    EXPECT_EQ(keys.find(7), nullptr);
    // One key only: the next ID finds nothing.
    const PeerKeys one({cur, 5});
    EXPECT_EQ(one.next_id(), 0);
    EXPECT_EQ(one.find(6), nullptr);
    // Too short for a header and a MAC: left alone.
    Bytes tiny(sizeof(MsgHeader) + kMacLen - 1, 0);
    one.seal(tiny);
    EXPECT_EQ(tiny, Bytes(sizeof(MsgHeader) + kMacLen - 1, 0));
}

TEST(PeerKeys, AZeroIdOrTwoKeysUnderOneIdAreRefused) {
    const Bytes k = repeat(0x31, 32);
    EXPECT_THROW(PeerKeys({k, 0}), std::invalid_argument);
    EXPECT_THROW(PeerKeys({k, 3}, PeerKeys::Key{k, 3}), std::invalid_argument);
    EXPECT_THROW(PeerKeys({k, 3}, PeerKeys::Key{k, 0}), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// ReplayWindow

constexpr uint64_t kNow = 1'700'000'000'000'000'000;  // 2023-11-14, in ns
constexpr uint64_t kSkew = 30'000'000'000;            // 30 s
constexpr uint64_t kW = ReplayWindow::kWindow;

// The gateway's order: check, (verify the MAC), accept.
ReplayVerdict check_and_accept(ReplayWindow& w, uint64_t seq) {
    const ReplayVerdict v = w.check(seq, kNow, kSkew);
    if (v == ReplayVerdict::ok) w.accept(seq);
    return v;
}

TEST(ReplayWindow, InOrderSequenceNumbersAreEachAcceptedOnce) {
    ReplayWindow w;
    for (uint64_t s = kNow; s < kNow + 5000; s += 3) ASSERT_EQ(check_and_accept(w, s), ReplayVerdict::ok) << s;
    EXPECT_EQ(w.highest(), kNow + 4998);
}

TEST(ReplayWindow, ADuplicateIsReplayed) {
    ReplayWindow w;
    EXPECT_EQ(check_and_accept(w, kNow), ReplayVerdict::ok);
    EXPECT_EQ(check_and_accept(w, kNow), ReplayVerdict::replayed);
    EXPECT_EQ(check_and_accept(w, kNow + 10), ReplayVerdict::ok);
    EXPECT_EQ(check_and_accept(w, kNow), ReplayVerdict::replayed);
    EXPECT_EQ(check_and_accept(w, kNow + 10), ReplayVerdict::replayed);
}

TEST(ReplayWindow, ReorderedWithinTheWindowIsAcceptedOnce) {
    ReplayWindow w;
    ASSERT_EQ(check_and_accept(w, kNow + 1000), ReplayVerdict::ok);
    for (uint64_t s : {kNow + 999, kNow + 500, kNow + 1000 - (kW - 1), kNow + 2, kNow + 998}) {
        EXPECT_EQ(check_and_accept(w, s), ReplayVerdict::ok) << s - kNow;
        EXPECT_EQ(check_and_accept(w, s), ReplayVerdict::replayed) << s - kNow;
    }
    EXPECT_EQ(check_and_accept(w, kNow + 997), ReplayVerdict::ok);
    EXPECT_EQ(w.highest(), kNow + 1000);
}

TEST(ReplayWindow, BelowTheWindowIsTooOldEvenIfNeverSeen) {
    ReplayWindow w;
    ASSERT_EQ(check_and_accept(w, kNow + 5000), ReplayVerdict::ok);
    EXPECT_EQ(w.check(kNow + 5000 - kW, kNow, kSkew), ReplayVerdict::too_old);
    EXPECT_EQ(w.check(kNow + 5000 - kW + 1, kNow, kSkew), ReplayVerdict::ok);  // the window's last slot
    EXPECT_EQ(w.check(kNow, kNow, kSkew), ReplayVerdict::too_old);
}

TEST(ReplayWindow, OlderThanNowMinusSkewIsStale) {
    const ReplayWindow w;
    EXPECT_EQ(w.check(kNow - kSkew - 1, kNow, kSkew), ReplayVerdict::stale);
    EXPECT_EQ(w.check(kNow - kSkew, kNow, kSkew), ReplayVerdict::ok);
    EXPECT_EQ(w.check(0, kNow, kSkew), ReplayVerdict::stale);
}

TEST(ReplayWindow, NewerThanNowPlusSkewIsFuture) {
    const ReplayWindow w;
    EXPECT_EQ(w.check(kNow + kSkew + 1, kNow, kSkew), ReplayVerdict::future);
    EXPECT_EQ(w.check(kNow + kSkew, kNow, kSkew), ReplayVerdict::ok);
    EXPECT_EQ(w.check(UINT64_MAX, kNow, kSkew), ReplayVerdict::future);
}

TEST(ReplayWindow, SkewBoundsSaturateInsteadOfWrappingAtTheEndsOfTheClock) {
    const ReplayWindow w;
    EXPECT_EQ(w.check(0, 5, 10), ReplayVerdict::ok);  // now - skew would wrap below zero
    EXPECT_EQ(w.check(UINT64_MAX, UINT64_MAX - 5, 10), ReplayVerdict::ok);  // now + skew would wrap
    EXPECT_EQ(w.check(UINT64_MAX - 100, UINT64_MAX - 5, 10), ReplayVerdict::stale);
}

TEST(ReplayWindow, SkewIsCheckedBeforeTheWindow) {
    ReplayWindow w;
    ASSERT_EQ(check_and_accept(w, kNow), ReplayVerdict::ok);
    // The same seq a minute later: stale, whatever the window says.
    EXPECT_EQ(w.check(kNow, kNow + 60'000'000'000, kSkew), ReplayVerdict::stale);
}

TEST(ReplayWindow, CheckWithoutAcceptDoesNotMoveTheWindow) {
    ReplayWindow w;
    ASSERT_EQ(check_and_accept(w, kNow), ReplayVerdict::ok);
    // A forged message far ahead: checked, its MAC fails, never accepted.
    EXPECT_EQ(w.check(kNow + 10 * kW, kNow, kSkew), ReplayVerdict::ok);
    EXPECT_EQ(w.highest(), kNow);
    EXPECT_EQ(w.check(kNow + 1, kNow, kSkew), ReplayVerdict::ok);  // not pushed below the window
    EXPECT_EQ(w.check(kNow + 10 * kW, kNow, kSkew), ReplayVerdict::ok);  // and not recorded as seen
    EXPECT_EQ(w.check(kNow, kNow, kSkew), ReplayVerdict::replayed);
}

TEST(ReplayWindow, AJumpFarAheadClearsTheBitmap) {
    ReplayWindow w;
    for (uint64_t s = kNow; s < kNow + kW; ++s) ASSERT_EQ(check_and_accept(w, s), ReplayVerdict::ok);
    const uint64_t top = kNow + 5 * kW;
    ASSERT_EQ(check_and_accept(w, top), ReplayVerdict::ok);
    for (uint64_t s = top - kW + 1; s < top; ++s) ASSERT_EQ(w.check(s, kNow, kSkew), ReplayVerdict::ok) << top - s;
    EXPECT_EQ(w.check(top, kNow, kSkew), ReplayVerdict::replayed);
}

TEST(ReplayWindow, AJumpOfExactlyTheWindowKeepsOnlyTheNewTop) {
    ReplayWindow w;
    ASSERT_EQ(check_and_accept(w, kNow), ReplayVerdict::ok);
    ASSERT_EQ(check_and_accept(w, kNow + kW), ReplayVerdict::ok);
    EXPECT_EQ(w.check(kNow, kNow, kSkew), ReplayVerdict::too_old);
    EXPECT_EQ(w.check(kNow + 1, kNow, kSkew), ReplayVerdict::ok);
}

TEST(ReplayWindow, ShiftsAcrossWordBoundariesKeepEverySeenBit) {
    // Seen bits at every offset from the top, then shifts by amounts around the 64-bit word size.
    for (uint64_t shift : {1u, 63u, 64u, 65u, 127u, 128u, 129u, 1000u, 1023u}) {
        ReplayWindow w;
        for (uint64_t s = kNow; s < kNow + kW; s += 2) ASSERT_EQ(check_and_accept(w, s), ReplayVerdict::ok);
        const uint64_t old_top = kNow + kW - 2;
        ASSERT_EQ(check_and_accept(w, old_top + shift), ReplayVerdict::ok);
        for (uint64_t s = old_top + shift - kW + 1; s <= old_top + shift; ++s) {
            const bool was_seen = s <= old_top ? (s - kNow) % 2 == 0 : s == old_top + shift;
            ASSERT_EQ(w.check(s, kNow, kSkew), was_seen ? ReplayVerdict::replayed : ReplayVerdict::ok)
                << "shift " << shift << ", offset " << old_top + shift - s;
        }
    }
}

TEST(ReplayWindow, AStartSeqRefusesEverythingUpToIt) {
    const ReplayWindow w(kNow);
    EXPECT_EQ(w.check(kNow, kNow, kSkew), ReplayVerdict::replayed);
    EXPECT_EQ(w.check(kNow - 1, kNow, kSkew), ReplayVerdict::replayed);
    EXPECT_EQ(w.check(kNow - kW, kNow, kSkew), ReplayVerdict::too_old);
    EXPECT_EQ(w.check(kNow + 1, kNow, kSkew), ReplayVerdict::ok);
}

TEST(ReplayWindow, AcceptBelowTheWindowIsIgnored) {
    ReplayWindow w;
    ASSERT_EQ(check_and_accept(w, kNow + 5000), ReplayVerdict::ok);
    w.accept(kNow);
    EXPECT_EQ(w.highest(), kNow + 5000);
    EXPECT_EQ(w.check(kNow + 5000 - 1, kNow, kSkew), ReplayVerdict::ok);
}

TEST(ReplayWindow, MatchesASetOfAcceptedSeqsOverRandomOperations) {
    // Reference: every accepted seq in a set; anything more than a window below the highest is too old.
    std::mt19937_64 rng(4303);
    ReplayWindow w;
    std::set<uint64_t> accepted;
    uint64_t top = 0;
    uint64_t now = kNow;
    const uint64_t skew = 5'000'000;  // 5 ms: the random walk reaches both skew bounds
    std::array<int, 5> seen_verdicts{};
    for (int i = 0; i < 100'000; ++i) {
        const uint64_t base = accepted.empty() ? now : top;
        uint64_t seq;
        switch (rng() % 8) {
        case 0: seq = base + 1 + rng() % 3; break;                     // in order
        case 1: seq = base + rng() % (3 * kW); break;                  // small jumps ahead
        case 2: seq = base + kW * (1 + rng() % 8) + rng() % 128; break;  // jumps of several windows
        case 3:                                                        // a repeat of an accepted one
            seq = accepted.empty() ? base : *std::prev(accepted.end(), 1 + static_cast<long>(rng() % std::min<std::size_t>(accepted.size(), 64)));
            break;
        case 4: seq = base - std::min<uint64_t>(base, rng() % (kW + 64)); break;  // reordered, some below the window
        case 5: seq = now + skew - 50 + rng() % 100; break;                      // around the future bound
        case 6: seq = now - skew - 50 + rng() % 100; break;                      // around the stale bound
        default: seq = base - std::min<uint64_t>(base, rng() % 8); break;        // recent duplicates
        }
        ReplayVerdict expect;
        if (seq > now + skew) {
            expect = ReplayVerdict::future;
        } else if (seq < now - skew) {
            expect = ReplayVerdict::stale;
        } else if (accepted.empty() || seq > top) {
            expect = ReplayVerdict::ok;
        } else if (top - seq >= kW) {
            expect = ReplayVerdict::too_old;
        } else {
            expect = accepted.count(seq) != 0 ? ReplayVerdict::replayed : ReplayVerdict::ok;
        }
        const ReplayVerdict got = w.check(seq, now, skew);
        ASSERT_EQ(got, expect) << "operation " << i << ": seq top" << static_cast<int64_t>(seq - top) << ", now "
                               << static_cast<int64_t>(seq - now) << ": got " << replay_verdict_name(got)
                               << ", expected " << replay_verdict_name(expect);
        ++seen_verdicts[static_cast<std::size_t>(got)];
        // One ok in eight is a forgery: checked but never accepted.
        if (got == ReplayVerdict::ok && rng() % 8 != 0) {
            w.accept(seq);
            accepted.insert(seq);
            top = std::max(top, seq);
        }
        ASSERT_EQ(w.highest(), top);
        now += rng() % 4096;  // the receiver's clock runs on at about the sender's rate
        if (rng() % 64 == 0) now = top;
    }
    for (std::size_t v = 0; v < seen_verdicts.size(); ++v)
        EXPECT_GT(seen_verdicts[v], 1000) << replay_verdict_name(static_cast<ReplayVerdict>(v)) << " too rare to test";
}

TEST(ReplayWindow, VerdictsHaveNames) {
    EXPECT_STREQ(replay_verdict_name(ReplayVerdict::ok), "ok");
    EXPECT_STREQ(replay_verdict_name(ReplayVerdict::replayed), "replayed");
    EXPECT_STREQ(replay_verdict_name(ReplayVerdict::too_old), "too_old");
    EXPECT_STREQ(replay_verdict_name(ReplayVerdict::stale), "stale");
    EXPECT_STREQ(replay_verdict_name(ReplayVerdict::future), "future");
}

// ---------------------------------------------------------------------------------------------
// SeqClock

TEST(SeqClock, FollowsTheClockAndCountsOnWhenItStandsStillOrStepsBack) {
    SeqClock c;
    EXPECT_EQ(c.next(100), 100u);
    EXPECT_EQ(c.next(100), 101u);
    EXPECT_EQ(c.next(100), 102u);
    EXPECT_EQ(c.next(50), 103u);  // wall clock stepped back
    EXPECT_EQ(c.next(1000), 1000u);
}

TEST(SeqClock, RealtimeIsNanosecondsSinceTheEpoch) {
    const uint64_t t = SeqClock::realtime_ns();
    EXPECT_GT(t, 1'600'000'000'000'000'000u);  // after September 2020
    EXPECT_LT(t, 4'000'000'000'000'000'000u);  // before 2096
}

TEST(SeqClock, FourThreadsGetStrictlyIncreasingValuesWithNoDuplicates) {
    constexpr int kThreads = 4, kCalls = 100'000;
    SeqClock c;
    std::vector<std::vector<uint64_t>> got(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&c, &out = got[t], t] {
            out.reserve(kCalls);
            // Half the threads read the wall clock, half pass a stuck clock: both paths race.
            for (int i = 0; i < kCalls; ++i) out.push_back(c.next(t % 2 == 0 ? SeqClock::realtime_ns() : 1));
        });
    }
    for (auto& th : threads) th.join();
    std::vector<uint64_t> all;
    for (const auto& v : got) {
        EXPECT_TRUE(std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end())
            << "one thread's values are not strictly increasing";
        all.insert(all.end(), v.begin(), v.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end()) << "two calls got the same value";
    EXPECT_EQ(all.size(), std::size_t{kThreads} * kCalls);
}

// ---------------------------------------------------------------------------------------------
// TokenBucket, RequesterLimiter

int allowed(TokenBucket& b, uint64_t now_ms, int tries) {
    int n = 0;
    for (int i = 0; i < tries; ++i) n += b.allow(now_ms);
    return n;
}

TEST(TokenBucket, StartsFullAndAllowsExactlyTheBurst) {
    TokenBucket b(10, 5);
    EXPECT_EQ(allowed(b, 1000, 20), 5);
}

TEST(TokenBucket, RefillsOneTokenPerIntervalOfTheRate) {
    TokenBucket b(10, 5);  // a token every 100 ms
    ASSERT_EQ(allowed(b, 1000, 5), 5);
    EXPECT_FALSE(b.allow(1099));
    EXPECT_TRUE(b.allow(1100));
    EXPECT_FALSE(b.allow(1100));
    EXPECT_EQ(allowed(b, 1400, 10), 3);
}

TEST(TokenBucket, FractionsOfATokenAccumulateExactly) {
    TokenBucket b(3, 2);  // a token every 333.3 ms
    ASSERT_EQ(allowed(b, 0, 2), 2);
    EXPECT_FALSE(b.allow(333));  // 999 milli-tokens
    EXPECT_TRUE(b.allow(334));   // 1002
    EXPECT_EQ(b.milli_tokens(), 2u);
    EXPECT_FALSE(b.allow(666));  // 2 + 996 = 998
    EXPECT_TRUE(b.allow(667));   // 1001
    EXPECT_EQ(b.milli_tokens(), 1u);
}

TEST(TokenBucket, RefillStopsAtTheBurst) {
    TokenBucket b(1000, 4);
    ASSERT_EQ(allowed(b, 0, 4), 4);
    EXPECT_EQ(allowed(b, 60'000, 100), 4);
}

TEST(TokenBucket, AHugeIdleGapRefillsWithoutOverflow) {
    TokenBucket b(UINT32_MAX, UINT32_MAX);
    ASSERT_TRUE(b.allow(1));
    EXPECT_TRUE(b.allow(UINT64_MAX));
    EXPECT_EQ(b.milli_tokens(), uint64_t{UINT32_MAX} * 1000 - 1000);
}

TEST(TokenBucket, AClockSteppingBackRefillsNothingUntilItCatchesUp) {
    TokenBucket b(10, 1);
    ASSERT_TRUE(b.allow(5000));
    EXPECT_FALSE(b.allow(1000));
    EXPECT_FALSE(b.allow(5099));
    EXPECT_TRUE(b.allow(5100));
}

TEST(TokenBucket, RateZeroNeverAllowsEvenWithABurst) {
    TokenBucket b(0, 10);
    EXPECT_EQ(allowed(b, 0, 5), 0);
    EXPECT_EQ(allowed(b, 1'000'000, 5), 0);
}

TEST(TokenBucket, BurstZeroNeverAllows) {
    TokenBucket b(100, 0);
    EXPECT_EQ(allowed(b, 0, 5), 0);
    EXPECT_EQ(allowed(b, 1'000'000, 5), 0);
}

// Two addresses in different slots, and two in the same slot, of `l`.
std::pair<uint32_t, uint32_t> addresses(const RequesterLimiter& l, bool same_slot) {
    const uint32_t a = 0xc6120a0a;  // 198.18.10.10
    for (uint32_t b = a + 1;; ++b)
        if ((l.slot_of(a) == l.slot_of(b)) == same_slot) return {a, b};
}

TEST(RequesterLimiter, EachRequesterHasItsOwnBurst) {
    RequesterLimiter l(64, 1, 3);
    const auto [a, b] = addresses(l, false);
    int na = 0, nb = 0;
    for (int i = 0; i < 10; ++i) na += l.allow(a, 1000), nb += l.allow(b, 1000);
    EXPECT_EQ(na, 3);
    EXPECT_EQ(nb, 3);
}

TEST(RequesterLimiter, ARequesterRefillsAtTheRate) {
    RequesterLimiter l(64, 2, 1);  // a token every 500 ms
    const uint32_t a = 0xc6120a0a;
    ASSERT_TRUE(l.allow(a, 0));
    EXPECT_FALSE(l.allow(a, 499));
    EXPECT_TRUE(l.allow(a, 500));
    EXPECT_FALSE(l.allow(a, 500));
}

TEST(RequesterLimiter, RequestersThatCollideShareOneBucket) {
    RequesterLimiter l(64, 1, 3);
    const auto [a, b] = addresses(l, true);
    EXPECT_EQ(l.allow(a, 1000) + l.allow(a, 1000) + l.allow(b, 1000) + l.allow(b, 1000) + l.allow(a, 1000), 3);
}

TEST(RequesterLimiter, SpreadsAddressesOverTheBuckets) {
    RequesterLimiter l(256, 1, 1);
    std::set<std::size_t> slots;
    for (uint32_t host = 1; host <= 254; ++host) slots.insert(l.slot_of(0xc6120100 | host));  // 198.18.1.0/24
    EXPECT_GT(slots.size(), 140u);  // a uniform hash of 254 keys into 256 slots fills ~161
}

TEST(RequesterLimiter, BucketCountMustBeAPowerOfTwo) {
    EXPECT_THROW(RequesterLimiter(0, 1, 1), std::invalid_argument);
    EXPECT_THROW(RequesterLimiter(100, 1, 1), std::invalid_argument);
    EXPECT_EQ(RequesterLimiter(128, 1, 1).size(), 128u);
    EXPECT_EQ(RequesterLimiter(1, 1, 1).size(), 1u);
}

}  // namespace
