#include "gateway/http/request_normaliser.hpp"

#include "gateway/http/text.hpp"

#include <boost/url/parse.hpp>

namespace rategate::gateway::h1 {

namespace {

bool is_unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

request_error bad_request(std::string message) {
    return {400, "bad_request", std::move(message)};
}

// An authority (`host[:port]`) for Host or an absolute-form target, lower-cased, or why not.
// RFC 9110 §4.2.4: userinfo is not allowed; RFC 9110 §7.2: Host = uri-host [ ":" port ].
std::optional<std::string> read_authority(std::string_view text, normalised_request& out,
                                          std::string& why) {
    auto parsed = boost::urls::parse_authority(text);
    if (!parsed || parsed->has_userinfo() || parsed->encoded_host().empty()) {
        why = "invalid host";
        return std::nullopt;
    }
    std::string host(parsed->encoded_host());
    for (auto& c : host)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    // A fully qualified name's trailing dot names the same host ("a.example." is "a.example",
    // RFC 1034 §3.1): dropped, so a host route and its limiters cannot be stepped around by it
    // (as Envoy's strip_trailing_host_dot).
    if (host.size() > 1 && host.back() == '.' && host.front() != '[') host.pop_back();
    out.host_name_length = host.size();
    out.port.reset();
    if (parsed->has_port() && !parsed->port().empty()) {
        auto p = parsed->port();
        unsigned long v = 0;
        for (char c : p) {
            v = v * 10 + static_cast<unsigned long>(c - '0');
            if (v > 65535) {
                why = "invalid port in host";
                return std::nullopt;
            }
        }
        out.port = static_cast<std::uint16_t>(v);
        host += ':';
        host += p;
    }
    return host;
}

}  // namespace

std::string normalised_request::origin_form(std::string_view p) const {
    std::string t;
    t.reserve(p.size() + (has_query ? query.size() + 1 : 0));
    t += p;
    if (has_query) {
        t += '?';
        t += query;
    }
    return t;
}

bool normalised_request::is_origin_form_of(std::string_view target) const {
    if (!target.starts_with(path)) return false;
    auto rest = target.substr(path.size());
    if (!has_query) return rest.empty();
    return rest.size() == query.size() + 1 && rest.front() == '?' && rest.substr(1) == query;
}

std::string remove_dot_segments(std::string_view in) {
    static constexpr std::string_view slash = "/";
    std::string out;
    out.reserve(in.size());
    auto pop_segment = [&out] {
        auto p = out.rfind('/');
        out.erase(p == std::string::npos ? 0 : p);
    };
    while (!in.empty()) {
        if (in.starts_with("../")) {  // A
            in.remove_prefix(3);
        } else if (in.starts_with("./")) {
            in.remove_prefix(2);
        } else if (in.starts_with("/./")) {  // B
            in.remove_prefix(2);
        } else if (in == "/.") {
            in = slash;
        } else if (in.starts_with("/../")) {  // C
            in.remove_prefix(3);
            pop_segment();
        } else if (in == "/..") {
            in = slash;
            pop_segment();
        } else if (in == "." || in == "..") {  // D
            in = {};
        } else {  // E: the first segment, with its leading '/', moves to the output
            auto end = in.find('/', 1);
            if (end == std::string_view::npos) end = in.size();
            out += in.substr(0, end);
            in.remove_prefix(end);
        }
    }
    return out;
}

std::optional<std::string> normalise_path(std::string_view path, std::string_view* why) {
    static constexpr char hex[] = "0123456789ABCDEF";
    auto fail = [why](std::string_view reason) -> std::optional<std::string> {
        if (why) *why = reason;
        return std::nullopt;
    };
    // RFC 3986 §6.2.2.1–2: decode unreserved escapes, upper-case the rest; merge '/' runs.
    std::string norm;
    norm.reserve(path.size());
    for (std::size_t i = 0; i < path.size(); ++i) {
        char c = path[i];
        if (c == '%') {
            if (i + 2 >= path.size()) return fail("malformed percent-encoding in path");
            int hi = hex_value(path[i + 1]);
            int lo = hex_value(path[i + 2]);
            if (hi < 0 || lo < 0) return fail("malformed percent-encoding in path");
            auto byte = static_cast<unsigned char>(hi * 16 + lo);
            // SPEC §3: an encoded control character never reaches an upstream (a NUL ends a
            // C string in many servers, a CR or LF splits a log line or a header).
            if (byte < 0x20 || byte == 0x7f) return fail("encoded control character in path");
            i += 2;
            if (is_unreserved(byte)) {
                norm += static_cast<char>(byte);
            } else {
                norm += '%';
                norm += hex[byte >> 4];
                norm += hex[byte & 15];
            }
            continue;
        }
        // A raw '\\' is a separator to some servers (IIS, Windows paths) and not to us: a
        // request could name one path here and another there. Encoded as %5C it is data.
        if (c == '\\') return fail("backslash in path");
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            return fail("control character in path");
        if (c == '/' && !norm.empty() && norm.back() == '/') continue;
        norm += c;
    }
    auto out = remove_dot_segments(norm);
    if (out.empty() || out.front() != '/') out.insert(out.begin(), '/');
    return out;
}

normalise_result normalise_request(const request_line& line, authority_memo* memo) {
    normalise_result r;
    if (line.method == "CONNECT") {
        r.error = request_error{405, "method_not_allowed",
                                "CONNECT is not served: rategate is a reverse proxy"};
        return r;
    }
    // RFC 9112 §3.2: exactly one valid Host in HTTP/1.1; never more than one.
    if (line.host_count > 1) {
        r.error = bad_request("more than one Host header");
        return r;
    }
    if (line.version >= 11 && line.host_count == 0) {
        r.error = bad_request("HTTP/1.1 request without Host header");
        return r;
    }
    normalised_request req;
    std::string why;
    if (line.host_count == 1 && memo && !memo->text.empty() && memo->text == line.host) {
        req.host = memo->host;
        req.host_name_length = memo->host_name_length;
        req.port = memo->port;
    } else if (line.host_count == 1) {
        auto host = read_authority(line.host, req, why);
        if (!host) {
            r.error = bad_request(why + " \"" + std::string(line.host) + "\"");
            return r;
        }
        req.host = std::move(*host);
        if (memo) {
            memo->text = line.host;
            memo->host = req.host;
            memo->host_name_length = req.host_name_length;
            memo->port = req.port;
        }
    }

    std::string_view path;
    if (!line.target.empty() && line.target.front() == '/') {
        auto origin = boost::urls::parse_origin_form(line.target);
        if (!origin) {
            r.error = bad_request("invalid request target");
            return r;
        }
        path = origin->encoded_path();
        if (origin->has_query()) {
            req.has_query = true;
            req.query = std::string(origin->encoded_query());
        }
    } else {
        auto absolute = boost::urls::parse_absolute_uri(line.target);
        if (!absolute || !absolute->has_authority() ||
            !(iequals(absolute->scheme(), "http") || iequals(absolute->scheme(), "https"))) {
            r.error = bad_request(
                "invalid request target: expected origin-form or an http(s) "
                "absolute-form");
            return r;
        }
        auto host = read_authority(absolute->encoded_authority(), req, why);
        if (!host) {
            r.error = bad_request(why + " in request target");
            return r;
        }
        req.host = std::move(*host);
        req.absolute_form = true;
        path = absolute->encoded_path();
        if (!path.empty() && path.front() != '/') {
            r.error = bad_request("invalid request target");
            return r;
        }
        if (absolute->has_query()) {
            req.has_query = true;
            req.query = std::string(absolute->encoded_query());
        }
    }
    std::string_view why_path;
    auto norm = normalise_path(path.empty() ? std::string_view("/") : path, &why_path);
    if (!norm) {
        r.error = bad_request(std::string(why_path));
        return r;
    }
    req.path = std::move(*norm);
    r.request = std::move(req);
    return r;
}

}  // namespace rategate::gateway::h1
