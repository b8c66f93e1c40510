#include "gateway/http2/request_head.hpp"
#include "gateway/http/text.hpp"

#include <boost/beast/core/string.hpp>

namespace rategate::gateway::http2 {

namespace http = boost::beast::http;

namespace {

// RFC 9110 §5.6.2 tchar, upper case excluded (RFC 9113 §8.2.1: field names are lower case).
bool is_lower_tchar(char c) {
    return h1::is_tchar(c) && !(c >= 'A' && c <= 'Z');
}

// RFC 9113 §8.2.1: no NUL, CR or LF, and no leading or trailing space or tab. Nor any other
// control or DEL (RFC 9110 §5.5), which the HTTP/1.1 reader refuses too (h1::find_non_value):
// a request must not reach an HTTP/1.1 upstream with bytes its own client could not send.
bool is_valid_value(std::string_view v) {
    if (h1::find_non_value(v, 0) != v.size()) return false;
    if (!v.empty() &&
        (v.front() == ' ' || v.front() == '\t' || v.back() == ' ' || v.back() == '\t'))
        return false;
    return true;
}

const char* check_regular_name(std::string_view name) {
    if (name.empty()) return "empty field name";
    for (char c : name)
        if (!is_lower_tchar(c)) return "field name not a lower-case token";
    // RFC 9113 §8.2.2: connection-specific fields are malformed in HTTP/2.
    if (is_connection_specific(name)) return "connection-specific field";
    return nullptr;
}

}  // namespace

bool is_connection_specific(std::string_view name) {
    using h1::iequals;
    return iequals(name, "connection") || iequals(name, "keep-alive") ||
           iequals(name, "proxy-connection") || iequals(name, "transfer-encoding") ||
           iequals(name, "upgrade");
}

request_head_builder::request_head_builder(std::size_t max_header_bytes) : max_(max_header_bytes) {}

request_head_builder::field_status request_head_builder::add(std::string_view name,
                                                             std::string_view value) {
    size_ += name.size() + value.size() + 32;
    if (size_ > 4 * max_) return field_status::flood;
    if (failed_) return field_status::malformed;
    if (!is_valid_value(value)) return fail("invalid field value");
    if (!name.empty() && name.front() == ':') {
        // RFC 9113 §8.3: pseudo-headers come first, once each, and only the request's four.
        if (regular_seen_) return fail("pseudo-header after a regular field");
        std::optional<std::string>* slot = nullptr;
        if (name == ":method")
            slot = &method_;
        else if (name == ":scheme")
            slot = &scheme_;
        else if (name == ":authority")
            slot = &authority_;
        else if (name == ":path")
            slot = &path_;
        else
            return fail("unknown pseudo-header");
        if (*slot) return fail("repeated pseudo-header");
        slot->emplace(value);
        return field_status::ok;
    }
    regular_seen_ = true;
    if (auto why = check_regular_name(name)) return fail(why);
    if (name == "te" && value != "trailers") return fail("te other than \"trailers\"");
    if (size_ > max_) return field_status::ok;  // a 431 at the end: keep nothing more
    if (name == "content-length") {
        std::uint64_t n = 0;
        if (value.empty() || value.size() > 18) return fail("invalid content-length");
        for (char c : value) {
            if (c < '0' || c > '9') return fail("invalid content-length");
            n = n * 10 + static_cast<std::uint64_t>(c - '0');
        }
        if (content_length_ && *content_length_ != n) return fail("conflicting content-length");
        if (content_length_) return field_status::ok;
        content_length_ = n;
    }
    if (name == "cookie") {
        // RFC 9113 §8.2.3: crumbs are joined with "; " for HTTP/1.1.
        if (!cookies_.empty()) cookies_ += "; ";
        cookies_ += value;
        return field_status::ok;
    }
    if (name == "host") {
        if (host_) return fail("repeated host");
        host_.emplace(value);
    }
    head_.insert(boost::beast::string_view(name.data(), name.size()),
                 boost::beast::string_view(value.data(), value.size()));
    return field_status::ok;
}

request_head_builder::head_status request_head_builder::finish() {
    if (failed_) return head_status::malformed;
    if (!method_ || method_->empty()) return fail("missing :method"), head_status::malformed;
    for (unsigned char c : *method_)
        if (!is_lower_tchar(c) && !(c >= 'A' && c <= 'Z'))
            return fail("invalid :method"), head_status::malformed;
    if (!scheme_ || scheme_->empty()) return fail("missing :scheme"), head_status::malformed;
    if (!path_ || path_->empty()) return fail("missing :path"), head_status::malformed;
    if (path_->front() != '/' && !(*path_ == "*" && *method_ == "OPTIONS"))
        return fail(":path not origin-form"), head_status::malformed;
    if (authority_ && host_ && *authority_ != *host_)
        return fail(":authority and host differ"), head_status::malformed;
    if (size_ > max_) return head_status::too_large;
    head_.method_string(*method_);
    head_.target(*path_);
    head_.version(11);
    if (!cookies_.empty()) head_.set(http::field::cookie, cookies_);
    if (!authority_ && !host_) return head_status::no_authority;
    // :authority is the Host (RFC 9113 §8.3.1).
    if (authority_ && !host_) head_.insert(http::field::host, *authority_);
    return head_status::ok;
}

const char* check_trailer_field(std::string_view name, std::string_view value) {
    if (!name.empty() && name.front() == ':') return "pseudo-header in trailers";
    if (auto why = check_regular_name(name)) return why;
    if (!is_valid_value(value)) return "invalid field value";
    return nullptr;
}

}  // namespace rategate::gateway::http2
