// Sans-I/O framing rules for a response, per HTTP version (RFC 9112 §6, §9.3): how the body is
// delimited to the client, whether the client connection stays open, and whether the upstream
// connection may carry another request. No Asio, no Beast here.
#pragma once

#include <cstdint>

namespace rategate::gateway::h1 {

/// How a response body is delimited on the wire to the client.
enum class body_framing {
    none,             ///< no body at all (HEAD, 1xx, 204, 304): head only, headers as they are
    sized,            ///< Content-Length, body byte for byte
    chunked,          ///< Transfer-Encoding: chunked (HTTP/1.1 clients only)
    close_delimited,  ///< no length: the body ends when the connection closes (HTTP/1.0)
};

/// The framing decision for one response.
struct response_framing {
    body_framing body = body_framing::sized;
    bool keep_alive = false;  ///< the client connection may carry another request
};

/// What is known of the exchange when the response head is about to be written.
struct framing_input {
    unsigned client_version = 11;     ///< the request's version: 10 or 11
    bool client_keep_alive = true;    ///< the client asked to keep the connection (RFC 9112 §9.3)
    bool head_request = false;        ///< the request method was HEAD
    unsigned status = 200;            ///< the response status
    bool has_content_length = false;  ///< the upstream's response carries Content-Length
    bool chunked = false;             ///< the upstream's response is chunked
};

/// Decides the framing: HEAD, 1xx, 204 and 304 never have a body; a sized body stays sized;
/// a body of unknown length (chunked, or close-delimited by the upstream) is chunked for
/// HTTP/1.1 and close-delimited for HTTP/1.0, which never receives Transfer-Encoding (RFC 9112
/// §6.1). Keep-alive holds only when the client asked for it and the body's end is known
/// without closing.
response_framing frame_response(const framing_input& in);

/// What is known of an upstream's response, from its head, when its exchange ends.
struct upstream_response_facts {
    bool keep_alive = true;          ///< its version and Connection allow another request
    bool bodiless = false;           ///< an answer to HEAD, or a 204 or 304: no body follows
    bool transfer_encoding = false;  ///< it carries Transfer-Encoding
    bool chunked = false;            ///< its last transfer coding is chunked
    bool has_content_length = false;
    std::uint64_t content_length = 0;  ///< when has_content_length (bytes)
};

/// Whether the upstream connection may go back to the pool (RFC 9112 §6.3): only when the head
/// gave the response's end. Not after a body that ends at close (neither sized nor chunked);
/// not after a bodiless answer whose head announced a body (Transfer-Encoding, or a
/// Content-Length above 0), which a sloppy upstream may send anyway, late, for the pool to
/// hand to another client as its response.
bool upstream_reusable(const upstream_response_facts& r);

}  // namespace rategate::gateway::h1
