// The one outcome of the limiting pipeline for a request, and the one place it is turned into
// what the world sees: the refusal response (SPEC §3), the rate-limit headers of an admitted
// response, the access log's words and the per-layer metrics. Replay prints the same words.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

#include "config/config.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "limiters/chain.hpp"
#include "limiters/policy.hpp"

namespace rategate::gateway {
struct loop_metrics;
}

namespace rategate::gateway::limiting {

/// What was decided for one request. to_string() gives the word the access log, the
/// `rategate_limiter_decisions_total{outcome}` label and replay use.
enum class verdict : std::uint8_t {
    allowed,           ///< every enforced layer admits
    delayed,           ///< admitted after a wait a delay layer reserved
    shadow_limited,    ///< admitted; a shadow layer would have rejected
    limited,           ///< an enforced layer rejects: the route's on_limit status
    denied,            ///< on_missing_key "deny": 403
    invalid_identity,  ///< a user id or header value over max_identity_bytes: 400
    error,             ///< Redis failed: forwarded (on_redis_error "allow") or 503 ("deny")
};
const char* to_string(verdict v);

/// The outcome of one request.
struct outcome {
    verdict what = verdict::allowed;
    bool forward = true;                ///< the request goes on to its upstream
    limiters::chain_decision decision;  ///< the chain's numbers, when a backend decided
    const limiters::policy::layer* decider = nullptr;  ///< the limiting / denying / invalid layer
    const limiters::policy::layer* header = nullptr;   ///< the most restrictive layer (headers)
    std::error_code redis_error;  ///< Redis failed; the route's on_redis_error applied
    bool used_local = false;      ///< decided by the in-process twin (on_redis_error "local")
    bool cached = false;          ///< answered by the over-limit cache
};

/// The rate-limit headers of the outcome's most restrictive layer, if any.
std::optional<rate_headers> headers_of(const outcome& o);

/// The limiter the access log names: the deciding layer of a refusal, else the most
/// restrictive one; "-" when none.
std::string_view log_layer(const outcome& o);

/// The response to a refused request (`!o.forward`): limited → the route's on_limit status with
/// Retry-After and the route's rate-limit headers; denied → 403; invalid_identity → 400;
/// error → 503 (SPEC §3). `head`: a response to HEAD (no body, Content-Length kept).
boost::beast::http::response<boost::beast::http::string_body> refusal_response(
    const outcome& o, const config::route_config& route, bool keep_alive, unsigned version,
    bool head);

/// Counts the outcome in `rategate_limiter_decisions_total`, per layer of `layers` (the chain
/// as decided, skipped layers left out; positions as in the decision): shadow layers as allowed
/// or shadow_limited, the rejecting layer as limited, the denying layer as denied, every layer
/// as error when Redis failed and no twin decided (one writer: the loop).
void count(const outcome& o, std::span<const limiters::policy::layer* const> layers,
           loop_metrics& m);

}  // namespace rategate::gateway::limiting
