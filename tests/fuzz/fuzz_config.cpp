// libFuzzer target: any text given as a config either parses or fails with a ConfigError; nothing
// else may escape, crash or hang.
#include <cstdint>
#include <string>

#include "controlplane/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 16384) return 0;
    try {
        fedgate::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
    } catch (const fedgate::ConfigError&) {
    }
    return 0;
}
