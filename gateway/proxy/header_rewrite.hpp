// Header rewriting of a reverse proxy (SPEC §3 "Forwarding"), sans-I/O over Beast's
// field container: hop-by-hop removal (RFC 9110 §7.6.1), X-Forwarded-*, Via, X-Request-Id.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <string>
#include <string_view>

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

/// Rewrites an upstream response's headers for the client: hop-by-hop removed, Via lines merged
/// into one with ours added, X-Request-Id echoed. Hop-by-hop, both ways: Connection,
/// Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade, Expect and every field named in
/// Connection; Transfer-Encoding, Content-Length (framing, re-derived by the serializer) and
/// Host are kept whatever Connection names.
void rewrite_response_headers(boost::beast::http::fields& f, std::string_view request_id);

/// A fresh random request id: 32 lowercase hex digits (128 bits of a per-thread SplitMix64
/// stream seeded from std::random_device: unique, not secret).
std::string make_request_id();

}  // namespace rategate::gateway
