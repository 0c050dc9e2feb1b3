// A small valid config for tests that need a whole Config: party alpha (1) with an internal and an
// external tap port, one peer (beta, 2) and three automatic-mapping ports.
#pragma once

namespace fedgate::test {

inline constexpr const char* kAlphaConfig = R"([gateway]
party = "alpha"
party_id = 1
[eal]
args = []
[[port]]
name = "inside"
role = "internal"
device = "net_tap0"
address = "198.18.1.1/24"
[[port]]
name = "outside"
role = "external"
device = "net_tap1"
address = "198.19.0.1/24"
[[peer]]
party = "beta"
party_id = 2
address = "198.19.0.2"
key = "00112233445566778899aabbccddeeff"
[connect]
auto_ports = "61000-61002"
)";

}  // namespace fedgate::test
