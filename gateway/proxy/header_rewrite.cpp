#include "gateway/proxy/header_rewrite.hpp"

#include <array>
#include <boost/container/small_vector.hpp>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gateway/http/router.hpp"
#include "gateway/http/text.hpp"

namespace rategate::gateway {

namespace http = boost::beast::http;

namespace {
constexpr std::string_view via_value = "1.1 rategate";

using h1::trim;

}  // namespace

namespace {

// The options of every Connection line: the fields they name are hop-by-hop too (copies: the
// Connection field itself may be erased; short ones stay inline, as do the first two).
using connection_names = boost::container::small_vector<std::string, 2>;
connection_names connection_tokens(const http::fields& f) {
    connection_names named;
    // A walk down the list by field code: cheaper than the name tree's search for a few fields.
    for (const auto& field : f)
        if (field.name() == http::field::connection)
            h1::for_each_element(field.value(),
                                 [&named](std::string_view token) { named.emplace_back(token); });
    return named;
}

// RFC 9110 §7.6.1: Connection, Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade, Expect and
// whatever Connection names, except our framing and Host, which a client may never strip.
bool hop_by_hop(const http::fields::value_type& field, const connection_names& named) {
    switch (field.name()) {
        case http::field::connection:
        case http::field::keep_alive:
        case http::field::proxy_connection:
        case http::field::te:
        case http::field::trailer:
        case http::field::upgrade:
        case http::field::expect:
            return true;
        case http::field::content_length:
        case http::field::transfer_encoding:
        case http::field::host:
            return false;
        default:
            for (const auto& n : named)
                if (boost::beast::iequals(n, field.name_string())) return true;
            return false;
    }
}

}  // namespace

namespace {

// The fields the rewrites read or replace, gathered in one pass over the field list.
enum class rewritten { none, forwarded_for, forwarded_proto, forwarded_host, request_id };

rewritten classify(const http::fields::value_type& field) {
    if (field.name() != http::field::unknown) return rewritten::none;
    auto n = field.name_string();
    if (n.size() == 15 && boost::beast::iequals(n, "X-Forwarded-For"))
        return rewritten::forwarded_for;
    if (n.size() == 17 && boost::beast::iequals(n, "X-Forwarded-Proto"))
        return rewritten::forwarded_proto;
    if (n.size() == 16 && boost::beast::iequals(n, "X-Forwarded-Host"))
        return rewritten::forwarded_host;
    if (n.size() == 12 && boost::beast::iequals(n, "X-Request-Id")) return rewritten::request_id;
    return rewritten::none;
}

// Appends the list elements of one field line to `joined` (", " between elements); `split`:
// at each ',' (X-Forwarded-For), else the line whole (Via, whose comments may hold commas).
void append_elements(std::string& joined, std::string_view line, bool split) {
    auto add = [&joined](std::string_view element) {
        element = trim(element);
        if (element.empty()) return;
        if (!joined.empty()) joined += ", ";
        joined += element;
    };
    if (!split) return add(line);
    for (auto comma = line.find(','); comma != std::string_view::npos; comma = line.find(',')) {
        add(line.substr(0, comma));
        line.remove_prefix(comma + 1);
    }
    add(line);
}

// One pass over `f`: hop-by-hop fields (and those Connection names) dropped, Via lines merged
// into `via`, and for a request X-Forwarded-For lines merged into `forwarded_for`,
// X-Forwarded-Proto/-Host dropped (they are set anew), the first Host and X-Request-Id values
// copied out, and every X-Request-Id line dropped when the first is no usable id (empty or over
// 200 bytes). `step(it, drop)` keeps or drops each field and returns the next iterator (erase
// it, or write it out). The same result as removing the hop-by-hop fields and then finding
// each name.
struct gathered {
    std::string forwarded_for, via, host, request_id;
    bool has_host = false, has_request_id = false, request_id_usable = false;
};
template <class Step>
gathered gather(http::fields& f, bool request, Step&& step) {
    gathered g;
    auto named = connection_tokens(f);
    for (auto it = f.begin(); it != f.end();) {
        bool drop = hop_by_hop(*it, named);
        if (drop) {
            // dropped below
        } else if (it->name() == http::field::host) {
            if (!g.has_host) g.host = it->value(), g.has_host = true;
        } else if (it->name() == http::field::via) {
            append_elements(g.via, it->value(), false);
            drop = true;
        } else {
            switch (classify(*it)) {
                case rewritten::forwarded_for:
                    if (!request) break;
                    append_elements(g.forwarded_for, it->value(), true);
                    drop = true;
                    break;
                case rewritten::forwarded_proto:
                case rewritten::forwarded_host:
                    drop = request;
                    break;
                case rewritten::request_id:
                    if (!g.has_request_id) {
                        g.request_id = it->value();
                        g.has_request_id = true;
                        g.request_id_usable = !g.request_id.empty() && g.request_id.size() <= 200;
                    }
                    drop = request && !g.request_id_usable;
                    break;
                case rewritten::none:
                    break;
            }
        }
        it = step(it, drop);
    }
    return g;
}

// The request rewrite over any output: `step` as gather()'s, `add(name, value)` appends a field.
template <class MakeId, class Step, class Add>
std::string rewrite_request(http::fields& f, const client_info& client, MakeId&& make_id,
                            Step&& step, Add&& add) {
    auto g = gather(f, true, step);
    append_elements(g.forwarded_for, client.peer_ip, true);
    add("X-Forwarded-For", g.forwarded_for);
    add("X-Forwarded-Proto", client.proto);
    if (g.has_host) add("X-Forwarded-Host", g.host);
    append_elements(g.via, via_value, false);
    add("Via", g.via);
    if (g.request_id_usable) return std::move(g.request_id);
    std::string id = make_id();
    add("X-Request-Id", id);
    return id;
}

// In place: dropped fields are erased, added ones inserted.
template <class MakeId>
std::string rewrite_request(http::fields& f, const client_info& client, MakeId&& make_id) {
    return rewrite_request(
        f, client, make_id,
        [&f](http::fields::iterator it, bool drop) { return drop ? f.erase(it) : std::next(it); },
        [&f](std::string_view name, std::string_view value) { f.insert(name, value); });
}

// One field line: the string grows once and the four pieces are copied in (the head's storage
// is reused per connection, so this rarely allocates).
void append_line(std::string& out, std::string_view name, std::string_view value) {
    const auto at = out.size();
    out.resize(at + name.size() + value.size() + 4);
    char* p = out.data() + at;
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    std::memcpy(p, ": ", 2);
    if (!value.empty()) std::memcpy(p + 2, value.data(), value.size());
    std::memcpy(p + 2 + value.size(), "\r\n", 2);
}

}  // namespace

std::string rewrite_request_headers(http::fields& f, const client_info& client,
                                    std::string_view new_request_id) {
    return rewrite_request(f, client, [&] { return std::string(new_request_id); });
}

std::string rewrite_request_headers(http::fields& f, const client_info& client) {
    return rewrite_request(f, client, make_request_id);
}

std::string append_forwarded_request_head(std::string& out, http::request_header<>& req,
                                          const client_info& client, std::string_view strip_prefix,
                                          bool websocket, std::string_view new_request_id) {
    out += req.method_string();
    out += ' ';
    if (strip_prefix.empty())
        out += req.target();
    else
        out += strip_path_prefix(req.target(), strip_prefix);
    out += " HTTP/1.1\r\n";
    auto make_id = [new_request_id] {
        return new_request_id.empty() ? make_request_id() : std::string(new_request_id);
    };
    auto id = rewrite_request(
        req, client, make_id,
        [&out](http::fields::iterator it, bool drop) {
            if (!drop) append_line(out, it->name_string(), it->value());
            return std::next(it);
        },
        [&out](std::string_view name, std::string_view value) { append_line(out, name, value); });
    if (websocket) out += "Upgrade: websocket\r\nConnection: Upgrade\r\n";
    out += "\r\n";
    return id;
}

void rewrite_response_headers(http::fields& f, std::string_view request_id) {
    auto g = gather(f, false, [&f](http::fields::iterator it, bool drop) {
        return drop ? f.erase(it) : std::next(it);
    });
    append_elements(g.via, via_value, false);
    f.insert(http::field::via, g.via);
    if (!g.has_request_id) f.insert("X-Request-Id", request_id);
}

namespace {

using h1::iequals;

// RFC 9110 §7.6.1's hop-by-hop fields by name (the flat twin of hop_by_hop()'s switch).
bool is_hop_by_hop_name(std::string_view n) {
    switch (n.size()) {
        case 2:
            return iequals(n, "TE");
        case 6:
            return iequals(n, "Expect");
        case 7:
            return iequals(n, "Trailer") || iequals(n, "Upgrade");
        case 10:
            return iequals(n, "Connection") || iequals(n, "Keep-Alive");
        case 16:
            return iequals(n, "Proxy-Connection");
        default:
            return false;
    }
}

// A field line of a response head, as the rewrite treats it.
enum class line_kind { keep, drop, via, content_length, transfer_encoding, request_id };

// The connection options of every Connection line (views into the head), few in practice.
using option_list = boost::container::small_vector<std::string_view, 4>;

option_list connection_options(const h1::response_head& head) {
    option_list named;
    for (const auto& f : head.fields)
        if (f.name.size() == 10 && iequals(f.name, "Connection"))
            h1::for_each_element(f.value,
                                 [&named](std::string_view token) { named.push_back(token); });
    return named;
}

line_kind classify_line(std::string_view name, const option_list& named) {
    if (is_hop_by_hop_name(name)) return line_kind::drop;
    switch (name.size()) {
        case 3:
            if (iequals(name, "Via")) return line_kind::via;
            break;
        case 4:
            if (iequals(name, "Host")) return line_kind::keep;
            break;
        case 12:
            if (iequals(name, "X-Request-Id")) return line_kind::request_id;
            break;
        case 14:
            if (iequals(name, "Content-Length")) return line_kind::content_length;
            break;
        case 17:
            if (iequals(name, "Transfer-Encoding")) return line_kind::transfer_encoding;
            break;
        default:
            break;
    }
    for (auto option : named)
        if (iequals(option, name)) return line_kind::drop;
    return line_kind::keep;
}

}  // namespace

void append_response_head(std::string& out, const h1::response_head& head,
                          const response_rewrite& rw) {
    using h1::body_framing;
    out += rw.client_version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
    char code[4];
    auto [code_end, ec] = std::to_chars(code, code + sizeof code, head.status);
    out.append(code, code_end);
    out += ' ';
    out += head.reason;
    out += "\r\n";

    // Ours replace the backend's rate-limit fields unless the backend's are stricter.
    std::span<const rate_field> ours;
    if (rw.rate && rw.rate_style != config::header_style::none) {
        std::string_view remaining, ratelimit;
        for (const auto& f : head.fields) {
            if (iequals(f.name, "X-RateLimit-Remaining") && remaining.empty()) remaining = f.value;
            if (iequals(f.name, "RateLimit") && ratelimit.empty()) ratelimit = f.value;
        }
        auto theirs = announced_remaining(remaining, ratelimit);
        if (!theirs || *theirs > rw.rate->remaining) ours = rate_fields(rw.rate_style);
    }
    auto replaced_by_ours = [&ours](std::string_view name) {
        for (auto field : ours)
            if (iequals(rate_field_name(field), name)) return true;
        return false;
    };

    const auto named = connection_options(head);
    const bool chunked_out = rw.framing == body_framing::chunked;
    // Chunked to the client over an upstream coding that is not: the last coding line gains
    // ", chunked" (what Beast's chunked(true) does), or the line is added.
    std::size_t last_coding = head.fields.size();
    if (chunked_out && head.transfer_encoding && !head.chunked)
        for (std::size_t i = 0; i < head.fields.size(); ++i)
            if (iequals(head.fields[i].name, "Transfer-Encoding")) last_coding = i;
    bool has_via = false, has_request_id = false;
    for (std::size_t i = 0; i < head.fields.size(); ++i) {
        const auto& f = head.fields[i];
        switch (classify_line(f.name, named)) {
            case line_kind::drop:
                continue;
            case line_kind::via:
                has_via = true;
                continue;
            case line_kind::request_id:
                has_request_id = true;
                break;
            case line_kind::content_length:
                if (chunked_out || rw.framing == body_framing::close_delimited) continue;
                break;
            case line_kind::transfer_encoding:
                if (rw.framing == body_framing::close_delimited ||
                    (rw.framing == body_framing::none && rw.client_version < 11))
                    continue;
                if (i == last_coding) {
                    out += f.name;
                    out += ": ";
                    out += f.value;
                    out += ", chunked\r\n";
                    continue;
                }
                break;
            case line_kind::keep:
                if (!ours.empty() && replaced_by_ours(f.name)) continue;
                break;
        }
        append_line(out, f.name, f.value);
    }
    // One Via line: every element the upstream's lines hold, in order, then ours.
    out += "Via: ";
    if (has_via)
        for (const auto& f : head.fields)
            if (f.name.size() == 3 && iequals(f.name, "Via") && !f.value.empty()) {
                out += f.value;
                out += ", ";
            }
    out += via_value;
    out += "\r\n";
    if (!has_request_id) append_line(out, "X-Request-Id", rw.request_id);
    for (auto field : ours) {
        out += rate_field_name(field);
        out += ": ";
        append_rate_value(out, field, *rw.rate);
        out += "\r\n";
    }
    if (chunked_out && !head.transfer_encoding) out += "Transfer-Encoding: chunked\r\n";
    if (rw.websocket)
        out += "Upgrade: websocket\r\nConnection: Upgrade\r\n";
    else if (rw.client_version >= 11 && !rw.keep_alive)
        out += "Connection: close\r\n";
    else if (rw.client_version < 11 && rw.keep_alive)
        out += "Connection: keep-alive\r\n";
    out += "\r\n";
}

std::string make_request_id() {
    // SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014)
    // from a per-thread random seed: an id, not a secret, so a few instructions per request.
    thread_local std::uint64_t state = std::random_device{}() * 0x9e3779b97f4a7c15ull ^
                                       (std::uint64_t{std::random_device{}()} << 32);
    auto next = [] {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    // Two hex digits per byte from one table: 16 lookups instead of 32 shifts and masks.
    static constexpr auto pairs = [] {
        std::array<char, 512> t{};
        constexpr char hex[] = "0123456789abcdef";
        for (int b = 0; b < 256; ++b) {
            t[static_cast<std::size_t>(2 * b)] = hex[b >> 4];
            t[static_cast<std::size_t>(2 * b + 1)] = hex[b & 0xf];
        }
        return t;
    }();
    std::string out(32, '0');
    for (int half = 0; half < 2; ++half) {
        auto v = next();
        for (int i = 0; i < 8; ++i, v >>= 8)
            std::memcpy(&out[static_cast<std::size_t>(half * 16 + 2 * i)], &pairs[2 * (v & 0xff)],
                        2);
    }
    return out;
}

}  // namespace rategate::gateway
