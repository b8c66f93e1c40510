// Forwarding of one request to its route's upstream and of the response back (SPEC §3),
// in the relay shape of Beast's examples: buffer_body parser and serializer, headers
// rewritten in between, bodies streamed in 64 KiB pieces in both directions.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace rategate::gateway {

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

/// Methods a request may be retried with on another connection (RFC 9110 §9.2.2).
bool is_idempotent(boost::beast::http::verb v);
/// A pooled connection the upstream had closed, found on first use (retried once).
bool is_stale_connection_error(const boost::system::error_code& ec);

/// Proxies the request whose header `parser` holds (its body still unread in `client` /
/// `client_buffer`) to `route`'s upstream and streams the response to the client.
/// Error responses (502, 504, 400, 413) are written here. Returns true when the client
/// connection can carry another request.
boost::asio::awaitable<bool> proxy_request(worker& w, runtime& rt, timed_socket& client,
                                           boost::beast::flat_buffer& client_buffer,
                                           request_parser& parser,
                                           const config::route_config& route,
                                           std::string_view peer_ip, const rate_headers* limits,
                                           exchange_record& record);

/// `limits`, when set, are the rate-limit headers to add to the response.
/// Writes a JSON error response (SPEC §3) to the client. Returns false if the write failed.
boost::asio::awaitable<bool> write_error(timed_socket& client, std::chrono::milliseconds timeout,
                                         unsigned status, std::string_view code,
                                         std::string_view message, bool keep_alive,
                                         unsigned version = 11, bool head_request = false);

}  // namespace rategate::gateway
