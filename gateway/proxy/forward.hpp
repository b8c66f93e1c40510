// Forwarding of one request to its route's upstream and of the response back (SPEC §3),
// in the relay shape of Beast's examples: buffer_body parser and serializer, headers
// rewritten in between, bodies streamed in 64 KiB pieces in both directions.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace rategate::gateway {

struct request_facts;

class worker;
struct runtime;
struct rate_headers;
struct timed_socket;

using request_parser = boost::beast::http::request_parser<boost::beast::http::buffer_body>;

/// What happened to one request, for the access log and the metrics.
struct exchange_record {
    unsigned status = 0;                        ///< status sent to the client (0: none)
    std::uint64_t bytes_in = 0, bytes_out = 0;  ///< body bytes relayed each way
    std::string_view upstream = "-";            ///< target host:port (owned by the pool)
    double upstream_us = -1;                    ///< request sent to response header, µs
    std::string request_id = "-";
    const char* limit_outcome = "-";
    std::string limit_layer = "-";
};

/// What the client is told when no connection to an upstream could be had (SPEC §3): 504
/// `upstream_timeout` when connecting timed out, else 502 `upstream_unavailable`, the message
/// naming the upstream (and ALPN when an "h2" target would not speak HTTP/2).
struct connect_failure {
    unsigned status;
    std::string_view code;
    std::string message;
};
connect_failure describe_connect_failure(const boost::system::error_code& ec,
                                         std::string_view upstream);

/// Methods a request may be retried with on another connection (RFC 9110 §9.2.2).
bool is_idempotent(boost::beast::http::verb v);
/// A pooled connection the upstream had closed, found on first use (retried once).
bool is_stale_connection_error(const boost::system::error_code& ec);

/// Proxies the request whose header `parser` holds (its body still unread in `client` /
/// `client_buffer`) to `route`'s upstream and streams the response to the client.
/// `facts`: what the session read from the request's fields (its keep-alive, RFC 9112 §9.3,
/// Expect, Upgrade, chunked).
/// Error responses (502, 504, 400, 413) are written here. Returns true when the client
/// connection can carry another request.
boost::asio::awaitable<bool> proxy_request(worker& w, runtime& rt, timed_socket& client,
                                           boost::beast::flat_buffer& client_buffer,
                                           request_parser& parser, const request_facts& facts,
                                           const config::route_config& route,
                                           std::string_view peer_ip, const rate_headers* limits,
                                           exchange_record& record);

/// proxy_request()'s second half for an upstream whose `protocol` is "h2" or "h2c"
/// (forward_h2.cpp): the request head, already rewritten for the upstream, goes out as an
/// HTTP/2 stream on a pooled connection, the body streams into DATA frames, and the response
/// streams back framed for the client's HTTP version (trailers are not forwarded to an
/// HTTP/1.1 client). Same errors and return value as proxy_request().
boost::asio::awaitable<bool> proxy_request_h2(
    worker& w, runtime& rt, timed_socket& client, boost::beast::flat_buffer& client_buffer,
    request_parser& parser, const config::route_config& route, const rate_headers* limits,
    exchange_record& record, unsigned client_version, bool client_keep_alive, bool expect_continue);

/// The HTTP/2 header list of an HTTP/1.1 request head (RFC 9113 §8.3.1): `:method`,
/// `:scheme`, `:authority` (from Host), `:path` (the target), then every field but Host and
/// the connection-specific ones (§8.2.2; `te` only as "trailers"), names lower-cased.
std::vector<std::pair<std::string, std::string>> h2_request_head(
    const boost::beast::http::request_header<>& req, std::string_view scheme);

/// The answer of proxy_request() and proxy_request_h2() when the exchange cannot go on: the
/// JSON error of `status` (write_error()) with the rate-limit headers of the request's
/// limiters (`rate`, in `route`'s style; SPEC §3: every response that went through a
/// limiter), noted in `record`; the connection is kept when the client asked for it, its body
/// was all read and the worker is not stopping. Returns true when the client connection can
/// carry another request.
boost::asio::awaitable<bool> fail_exchange(worker& w, timed_socket& client,
                                           const request_parser& parser, exchange_record& record,
                                           std::chrono::milliseconds timeout,
                                           bool client_keep_alive, unsigned client_version,
                                           bool head_request, const config::route_config& route,
                                           const rate_headers* rate, unsigned status,
                                           std::string_view code, std::string_view message);

/// Writes `res` whole to `client`: head and body serialized into `scratch` (storage reused by
/// the caller) and offered to the kernel at once, what it does not take sent under `timeout`.
/// Returns the write's error.
boost::asio::awaitable<boost::system::error_code> write_response(
    timed_socket& client, const boost::beast::http::response<boost::beast::http::string_body>& res,
    std::string& scratch, std::chrono::milliseconds timeout);

/// Writes a JSON error response (SPEC §3) to the client, with the rate-limit headers `rate`
/// in `style` when set. Returns false if the write failed.
boost::asio::awaitable<bool> write_error(timed_socket& client, std::chrono::milliseconds timeout,
                                         unsigned status, std::string_view code,
                                         std::string_view message, bool keep_alive,
                                         unsigned version = 11, bool head_request = false,
                                         const rate_headers* rate = nullptr,
                                         config::header_style style = config::header_style::none);

}  // namespace rategate::gateway
