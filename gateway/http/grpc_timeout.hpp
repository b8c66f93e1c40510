// The gRPC deadline (gRPC over HTTP/2, "Requests": Timeout → "grpc-timeout" TimeoutValue
// TimeoutUnit, at most 8 digits; H hours, M minutes, S seconds, m ms, u µs, n ns). Sans-I/O:
// the gateway bounds a call by the smaller of the client's grpc-timeout and the upstream's
// response_timeout, and passes what is left on (SPEC §3 "gRPC").
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rategate::gateway::grpc {

/// The duration a `grpc-timeout` value names, or nullopt when it is not one (empty, more than
/// 8 digits, a sign, spaces, an unknown unit). Nanosecond and microsecond values round up to
/// whole microseconds; hours cap at what std::chrono::microseconds holds.
std::optional<std::chrono::microseconds> parse_timeout(std::string_view value);

/// `left` as a `grpc-timeout` value: the finest unit whose count fits in 8 digits (so the
/// value never claims more time than is left), at least "1u" once time is left, "0n" when none.
std::string format_timeout(std::chrono::microseconds left);

}  // namespace rategate::gateway::grpc
