// The decision half of a request, shared by every protocol the listener speaks (SPEC §3): the
// head is normalised, routed, its bearer token verified and its identity run through the
// route's limiter chain. An HTTP/1.1 request (session.cpp) and an HTTP/2 stream
// (gateway/http2/) both call admit(); what they differ in is only how the answer is written.
// request_scope is the other shared piece: the metrics and the access-log line of a request.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "gateway/admin/metrics.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "gateway/proxy/forward.hpp"

namespace rategate::gateway {

struct runtime;
struct request_facts;
namespace h1 {
struct authority_memo;
}

/// The protocol a request arrived on.
enum class wire_protocol { http1, http2 };

/// What admit() needs to know about where the request came from.
struct admission_input {
    /// The TCP peer as a client IP (identity::canonical_ip; "" when it is none), made once per
    /// connection.
    std::string_view peer_ip;
    bool tls = false;  ///< arrived over HTTPS (routes match port 443, else 80)
    wire_protocol protocol = wire_protocol::http1;
    /// The connection could carry another request after a refusal (HTTP/1.1: the body was
    /// fully read and the client asked for keep-alive). Read again after the limiter's wait.
    bool can_keep_alive = true;
    const bool* stopping = nullptr;  ///< the worker's stop flag: no keep-alive once set
    unsigned version = 11;           ///< HTTP/1.x minor version of a refusal (10 or 11)
    bool head = false;               ///< a HEAD request: a refusal has no body
    /// The connection's remembered Host parse (gateway/http/request_normaliser.hpp), if any.
    h1::authority_memo* host_memo = nullptr;
    /// The request's fields read once (request_facts.hpp), if the caller has them already.
    const request_facts* facts = nullptr;

    /// A refusal may keep the connection: allowed and the worker is not stopping.
    bool keep_alive() const { return can_keep_alive && !(stopping && *stopping); }
    /// The HTTP/1.x minor version a refusal is written in (10 or 11).
    unsigned reply_version() const { return version == 10 ? 10 : 11; }
};

/// The decision: either a route to forward to (with its rate-limit headers) or a refusal.
struct admission {
    const config::route_config* route = nullptr;  ///< matched route (set on refusals too once
                                                  ///< routed)
    std::optional<rate_headers> rate;             ///< headers for the forwarded response
    /// The complete refusal response (status, JSON body, rate-limit and Retry-After or
    /// WWW-Authenticate headers, Connection) when the request is not forwarded.
    std::optional<boost::beast::http::response<boost::beast::http::string_body>> refusal;
    bool close = false;    ///< the request was malformed: the connection must not go on
    bool limited = false;  ///< refused by an enforced limiter (gRPC: RESOURCE_EXHAUSTED)
    std::optional<std::string> jwt_user;  ///< the verified bearer token's user, if any
    bool admitted() const { return !refusal; }
    /// From admit_head(): routed and not refused, with the route's limiter chain to run next
    /// (check_limits()).
    bool limits_pending() const { return !refusal && route && !route->limiters.empty(); }
};

/// True for a gRPC content type: `application/grpc` or `application/grpc+…` (not grpc-web).
bool is_grpc_content_type(std::string_view content_type);

/// Counts one request in the metrics and writes its access-log line when it ends (nothing
/// when no status was answered: the client went away).
struct request_scope {
    request_scope(runtime& rt, const std::string& peer) : rt(rt), peer(peer) {}
    ~request_scope();
    request_scope(const request_scope&) = delete;
    request_scope& operator=(const request_scope&) = delete;
    runtime& rt;
    const std::string& peer;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    exchange_record rec;
    const config::route_config* route = nullptr;
    std::string method = "-", path = "-";
    request_protocol protocol = request_protocol::http1;  ///< for the metrics
};

/// Decides request `req` (SPEC §3, in this order): normalise Host and target (the errors of
/// gateway/http/request_normaliser.hpp, closing the connection); a gRPC request over HTTP/1.1
/// → 426; route (none → 404); a presented bearer token verified (invalid → 401); the route's
/// limiter chain (refused → refusal_response). `req`'s Host and target are rewritten to their
/// normalised form when that differs; `scope` gets the route, method, path and limiter outcome.
boost::asio::awaitable<admission> admit(runtime& rt, boost::beast::http::request_header<>& req,
                                        const admission_input& in, request_scope& scope);

/// admit()'s steps up to the limiter chain, which need no waiting: a route with no limiters
/// is decided here with no coroutine; otherwise check_limits() follows (limits_pending()).
admission admit_head(runtime& rt, boost::beast::http::request_header<>& req,
                     const admission_input& in, request_scope& scope);

/// admit()'s last step for `a` from admit_head(): the route's limiter chain, which sets
/// `a.rate` or the refusal.
boost::asio::awaitable<void> check_limits(runtime& rt, boost::beast::http::request_header<>& req,
                                          const admission_input& in, request_scope& scope,
                                          admission& a);

}  // namespace rategate::gateway
