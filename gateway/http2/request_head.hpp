// One HTTP/2 request's header block turned into the request head the HTTP/1.1 path decides on
// (RFC 9113 §8.2–§8.3, SPEC §3 "HTTP/2"), sans-I/O: the fields come in decoded, one at a time,
// from nghttp2's HPACK decoder (its own HTTP checks are off: this file is the one place that
// says what a malformed request is). Cookies are joined with "; " (RFC 9113 §8.2.3) and
// `:authority` becomes Host, so the normaliser, router and limiter see what HTTP/1.1 sees.
#pragma once

#include <boost/beast/http/message.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rategate::gateway::http2 {

class request_head_builder {
  public:
    /// `max_header_bytes`: limits.max_header_bytes, measured as RFC 9113 §6.5.2 does (name +
    /// value + 32 per field).
    explicit request_head_builder(std::size_t max_header_bytes);

    enum class field_status {
        ok,
        malformed,  ///< a stream error PROTOCOL_ERROR (reason())
        flood,      ///< the block passed four times the limit: end the connection
    };
    /// Adds one decoded field of the request's header block.
    field_status add(std::string_view name, std::string_view value);

    enum class head_status {
        ok,
        malformed,     ///< stream error PROTOCOL_ERROR (reason())
        no_authority,  ///< neither :authority nor host: a 400
        too_large,     ///< over max_header_bytes: a 431
    };
    /// Ends the block: checks what only the whole block shows (required pseudo-headers,
    /// :authority against host) and builds head().
    head_status finish();

    /// The request (HTTP/1.1 form: method, origin-form target, Host, fields) after finish().
    boost::beast::http::request_header<>& head() { return head_; }
    /// The content-length the client declared, if any (DATA must add up to it).
    std::optional<std::uint64_t> content_length() const { return content_length_; }
    /// Bytes of the block so far (RFC 9113 §6.5.2 measure).
    std::size_t size() const { return size_; }
    const char* reason() const { return reason_; }

  private:
    field_status fail(const char* why) {
        reason_ = why;
        failed_ = true;
        return field_status::malformed;
    }

    std::size_t max_;
    std::size_t size_ = 0;
    bool failed_ = false, regular_seen_ = false;
    const char* reason_ = "";
    std::optional<std::string> method_, scheme_, authority_, path_, host_;
    std::string cookies_;
    std::optional<std::uint64_t> content_length_;
    boost::beast::http::request_header<> head_;
};

/// RFC 9113 §8.2.2: Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding and Upgrade
/// are connection-specific: malformed in a request, never sent on HTTP/2 (ASCII
/// case-insensitive; TE, allowed only as "trailers", is the caller's).
bool is_connection_specific(std::string_view name);

/// Checks a trailer field (a HEADERS block after DATA): no pseudo-header, a lower-case token
/// name, a valid value. Returns the reason it is malformed, or nullptr.
const char* check_trailer_field(std::string_view name, std::string_view value);

}  // namespace rategate::gateway::http2
