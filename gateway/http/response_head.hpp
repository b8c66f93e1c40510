// An upstream's HTTP/1.x response head, parsed in place (RFC 9112 §4 status line, §5 field
// lines, §6 framing facts), sans-I/O: the proxy reads the head into its buffer, this parses it
// into views of that buffer with no allocation once the field vector has grown, and the
// rewritten head for the client is written from it in one pass (gateway/proxy/header_rewrite).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace rategate::gateway::h1 {

/// One field line: views into the parsed bytes; the value without surrounding OWS.
struct field_line {
    std::string_view name, value;
};

/// A parsed HTTP/1.x response head. Views stay valid while the parsed bytes do.
struct response_head {
    unsigned version = 11;  ///< HTTP/1.x minor version ×10 + 10: 10 or 11
    unsigned status = 0;    ///< three-digit status code, 100–999
    std::string_view reason;
    std::vector<field_line> fields;  ///< every field line in order (storage reused by parses)
    /// Content-Length (repeated lines must agree), absent when the head has none.
    std::optional<std::uint64_t> content_length;
    bool transfer_encoding = false;      ///< a Transfer-Encoding line is present
    bool chunked = false;                ///< the last transfer coding is `chunked`
    bool connection_close = false;       ///< Connection names `close`
    bool connection_keep_alive = false;  ///< Connection names `keep-alive`
    std::size_t length = 0;              ///< bytes of the head, the final CRLFCRLF included

    /// The upstream keeps the connection after this response (RFC 9112 §9.3): HTTP/1.1 unless
    /// `close`, HTTP/1.0 only with `keep-alive`.
    bool keep_alive() const { return version >= 11 ? !connection_close : connection_keep_alive; }
    /// The body is delimited by Content-Length (and no Transfer-Encoding overrides it).
    bool sized() const { return content_length && !transfer_encoding; }
};

/// The outcome of one parse attempt.
struct head_parse {
    enum class state { incomplete, complete, malformed, too_large } status = state::incomplete;
    const char* reason = "";  ///< why, when malformed
};

/// Parses the response head at the start of `data` once it is all there, in one pass (an
/// incomplete head is parsed again when more bytes arrive: at most `max_bytes` each time).
/// Lines end in CRLF; a bare LF or CR, NUL, a control byte in
/// a value, obs-fold, a field name that is not a token, an invalid or conflicting
/// Content-Length, or a status line other than `HTTP/1.0|1.1 DDD [reason]` is malformed; a head
/// longer than `max_bytes` is too_large. Fills `out` when complete.
head_parse parse_response_head(std::string_view data, std::size_t max_bytes, response_head& out);

}  // namespace rategate::gateway::h1
