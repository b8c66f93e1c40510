// Sans-I/O request normaliser (SPEC §3, RFC 9112 §3.2, RFC 3986 §6.2.2 and §5.2.4): turns the
// request line and Host field lines that Beast's parser left into the one form the router, the
// limiters and the forwarder see, or into the error the client gets. No Asio, no Beast here.
// Namespace h1 (HTTP/1.x rules): `http` is the alias of Beast's namespace throughout gateway/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rategate::gateway::h1 {

/// The parts of a request head the normaliser reads, as sent (views into the parser's message).
struct request_line {
    std::string_view method;     ///< e.g. "GET", case-sensitive (RFC 9110 §9.1)
    std::string_view target;     ///< request-target as sent
    unsigned version = 11;       ///< 10 or 11 (HTTP/1.0, HTTP/1.1)
    std::size_t host_count = 0;  ///< number of Host field lines
    std::string_view host;       ///< value of the first Host field line (empty if none)
};

/// A request as routed, limited and forwarded.
struct normalised_request {
    std::string path;        ///< normalised absolute path, percent-encoded ("/" at least)
    std::string query;       ///< the query as sent, without '?'; meaningful when has_query
    bool has_query = false;  ///< the target had a '?'
    /// The authority to route by and forward as Host: the host lower-cased, its port as sent.
    /// Empty only for an HTTP/1.0 request without Host.
    std::string host;
    std::size_t host_name_length = 0;   ///< host.substr(0, host_name_length) is the name
    std::optional<std::uint16_t> port;  ///< the port named in `host`, if any
    bool absolute_form = false;         ///< the authority came from the target: replace Host
    /// The host name without the port (IPv6 literals keep their brackets).
    std::string_view host_name() const {
        return std::string_view(host).substr(0, host_name_length);
    }
    /// Origin-form target for `path` (e.g. after a prefix was stripped) plus the query.
    std::string origin_form(std::string_view p) const;
    /// True when `target` already is origin_form(path): nothing to rewrite (no allocation).
    bool is_origin_form_of(std::string_view target) const;
};

/// Why a request cannot be served; `status` is the HTTP status to answer with.
struct request_error {
    unsigned status = 400;  ///< 400 malformed, 405 CONNECT
    std::string_view code;  ///< the JSON body's "error" (static string)
    std::string message;    ///< the JSON body's "message"
};

/// The outcome: exactly one of `request` and `error` is set.
struct normalise_result {
    std::optional<normalised_request> request;
    std::optional<request_error> error;
};

/// The last Host a connection's normaliser read and what it read it as: requests of one
/// connection nearly always repeat their Host, so its parse is done once per connection.
struct authority_memo {
    std::string text;  ///< the Host value as sent (empty: nothing remembered)
    std::string host;  ///< normalised_request::host for it
    std::size_t host_name_length = 0;
    std::optional<std::uint16_t> port;
};

/// Normalises one request: CONNECT → 405; an HTTP/1.1 request needs exactly one valid Host
/// (`host[:port]`, no userinfo), any request more than one → 400; origin-form or absolute-form
/// (`http`/`https`) targets only, no fragment, no malformed escape → else 400; an
/// absolute-form authority replaces Host. The path is normalised by normalise_path().
/// With `memo`, a Host equal to the remembered one is taken from it and a new one remembered.
normalise_result normalise_request(const request_line& line, authority_memo* memo = nullptr);

/// Path normalisation of SPEC §3, in this order: percent-encoded unreserved characters decoded
/// and other escapes upper-cased (RFC 3986 §6.2.2.1–2; `%2F` and `%5C` stay encoded), runs of
/// '/' merged into one, then dot segments removed (RFC 3986 §5.2.4; `/../a` is `/a`). `path`
/// must be an absolute path whose escapes are valid (callers check the grammar first); an
/// invalid escape, an encoded control character (`%00`–`%1F`, `%7F`), a raw control character
/// or a raw `\` is refused (SPEC §3: a 400): nullopt, with the reason in `*why` when given.
/// Idempotent.
std::optional<std::string> normalise_path(std::string_view path, std::string_view* why = nullptr);

/// RFC 3986 §5.2.4 remove_dot_segments, as written there (input and output buffers).
std::string remove_dot_segments(std::string_view path);

}  // namespace rategate::gateway::h1
