// The gateway's own refusals as gRPC sees them (SPEC §3 "gRPC"), sans-I/O: which grpc-status
// an HTTP refusal becomes, and grpc-message's percent-encoding (gRPC's PROTOCOL-HTTP2.md,
// "Responses": Percent-Byte-Unencoded is 0x20–0x7E except '%').
#pragma once

#include <string>
#include <string_view>

namespace rategate::gateway {

/// The gRPC status code (grpc/status.h numbering) of a refusal with HTTP status `http_status`:
/// `limited` (an enforced limiter refused, whatever on_limit.status) and 413 → 8
/// RESOURCE_EXHAUSTED, 401 → 16 UNAUTHENTICATED, 403 → 7 PERMISSION_DENIED, 404 and 405 → 12
/// UNIMPLEMENTED, 400 and 431 → 3 INVALID_ARGUMENT, 502 and 503 → 14 UNAVAILABLE, 504 → 4
/// DEADLINE_EXCEEDED; anything else → 2 UNKNOWN.
int grpc_status_for(unsigned http_status, bool limited);

/// `message` percent-encoded for grpc-message: bytes outside 0x20–0x7E and '%' become %XX
/// (upper-case hex), so UTF-8 passes byte by byte.
std::string grpc_percent_encode(std::string_view message);

}  // namespace rategate::gateway
