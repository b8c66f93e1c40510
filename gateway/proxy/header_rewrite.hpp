// Header rewriting of a reverse proxy (SPEC §3 "Forwarding"), sans-I/O over Beast's
// field container: hop-by-hop removal (RFC 9110 §7.6.1), X-Forwarded-*, Via, X-Request-Id.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "gateway/http/ratelimit_headers.hpp"
#include "gateway/http/response_framing.hpp"
#include "gateway/http/response_head.hpp"

namespace rategate::gateway {

/// What the proxy knows about the client side of a request.
struct client_info {
    std::string_view peer_ip;  ///< address of the TCP peer, no port
    std::string_view proto = "http";
};

/// Rewrites a request's headers for the upstream: hop-by-hop removed; X-Forwarded-For becomes one
/// field line holding every entry of every line the client sent, in order, then the peer
/// (RFC 9110 §5.3 list semantics); X-Forwarded-Proto and X-Forwarded-Host overwritten; Via
/// lines merged the same way with ours added; X-Request-Id kept (1–200 bytes) or set to a fresh
/// make_request_id(), made only then. One pass over the field list. Returns the id in force.
std::string rewrite_request_headers(boost::beast::http::fields& f, const client_info& client);
/// The same with `new_request_id` as the id to set when the request has none.
std::string rewrite_request_headers(boost::beast::http::fields& f, const client_info& client,
                                    std::string_view new_request_id);

/// Writes the head of `req` as an HTTP/1.1 upstream receives it onto `out` (request line,
/// fields, CRLF) with rewrite_request_headers()'s rules applied on the way, with no change to
/// `req`'s field container: the target without `strip_prefix` (when set), always HTTP/1.1 and
/// kept alive (no Connection: it is hop-by-hop), and for a WebSocket handshake `Upgrade:
/// websocket` and `Connection: Upgrade`. `new_request_id`: the id to set when the request has
/// none (empty: a fresh make_request_id()). Returns the request id in force.
std::string append_forwarded_request_head(std::string& out,
                                          boost::beast::http::request_header<>& req,
                                          const client_info& client, std::string_view strip_prefix,
                                          bool websocket, std::string_view new_request_id = {});

/// Rewrites an upstream response's headers for the client: hop-by-hop removed, Via lines merged
/// into one with ours added, X-Request-Id echoed. Hop-by-hop, both ways: Connection,
/// Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade, Expect and every field named in
/// Connection; Transfer-Encoding, Content-Length (framing, re-derived by the serializer) and
/// Host are kept whatever Connection names.
void rewrite_response_headers(boost::beast::http::fields& f, std::string_view request_id);

/// What the head of a response forwarded to an HTTP/1.x client depends on besides the
/// upstream's head.
struct response_rewrite {
    std::string_view request_id;   ///< echoed as X-Request-Id unless the upstream set one
    unsigned client_version = 11;  ///< the status line's version: 10 or 11
    bool keep_alive = true;        ///< the client connection stays open after this response
    h1::body_framing framing = h1::body_framing::sized;  ///< how the body goes to the client
    const rate_headers* rate = nullptr;  ///< the route's rate-limit headers, when it has some
    config::header_style rate_style = config::header_style::none;
    bool websocket = false;  ///< a 101 to WebSocket: Upgrade and Connection are set for it
};

/// Writes `head` as the client receives it (status line, fields, CRLF) onto `out` in one pass
/// over its field lines, with no field container: rewrite_response_headers()'s rules, then
/// apply_rate_headers() keeping a stricter backend's, then the framing's fields (none to an
/// HTTP/1.0 client: no Transfer-Encoding; chunked: `Transfer-Encoding: chunked`, no
/// Content-Length; close-delimited: neither), then Connection for `keep_alive` and the version
/// (`close` on 1.1, `keep-alive` on 1.0, nothing otherwise; `Upgrade` for a WebSocket 101).
void append_response_head(std::string& out, const h1::response_head& head,
                          const response_rewrite& rw);

/// A fresh random request id: 32 lowercase hex digits (128 bits of a per-thread SplitMix64
/// stream seeded from std::random_device: unique, not secret).
std::string make_request_id();

}  // namespace rategate::gateway
