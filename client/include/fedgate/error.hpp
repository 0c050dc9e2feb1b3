// The one error convention of the fedgate client library: every call that fails throws
// fedgate::Error, which names the stage that failed (stage()) and says why (what() is
// "stage STAGE: why"). A connection's data-path failures are ConnectionError, an Error of stage
// data. The only non-error outcome is Endpoint::accept's timeout, which returns no connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace fedgate {

// Where a call failed. The first eight are the stages of a connect(), in order; a connect failure
// names one of them. `open`: opening an endpoint (bad option, socket, registration refused or not
// answered).
enum class ConnStage : uint8_t { resolve, req, rep, refused, transport, rtr, rts, data, open };
inline constexpr std::size_t kConnStageCount = 8;  // the connect stages (resolve .. data)
// "resolve", "req", "rep", "refused", "transport", "rtr", "rts", "data", "open".
const char* conn_stage_name(ConnStage s);

class Error : public std::runtime_error {
public:
    Error(ConnStage stage, const std::string& why);
    ConnStage stage() const noexcept { return stage_; }
    const std::string& why() const noexcept { return why_; }  // the message without "stage X: "

private:
    ConnStage stage_;
    std::string why_;
};

// A data-path failure (peer gone, QP in error, socket reset): an Error of stage data.
class ConnectionError : public Error {
public:
    explicit ConnectionError(const std::string& why) : Error(ConnStage::data, why) {}
};

}  // namespace fedgate
