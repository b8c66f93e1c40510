#include "gateway/http/response_head.hpp"

#include <array>
#include <charconv>
#include "gateway/http/text.hpp"

namespace rategate::gateway::h1 {

namespace {

// Token bytes (RFC 9110 §5.6.2 tchar), one table lookup per byte of a field name; values are
// scanned eight bytes at a time (find_non_value).
constexpr auto token_bytes = [] {
    std::array<bool, 256> t{};
    for (int c = 0; c < 256; ++c)
        t[static_cast<std::size_t>(c)] = is_tchar(static_cast<char>(c));
    return t;
}();

bool is_token_byte(char c) {
    return token_bytes[static_cast<unsigned char>(c)];
}

// Reads the tokens of a Connection line into the head's close / keep-alive flags.
void read_connection(std::string_view value, response_head& out) {
    for_each_element(value, [&out](std::string_view token) {
        if (iequals(token, "close")) out.connection_close = true;
        if (iequals(token, "keep-alive")) out.connection_keep_alive = true;
    });
}

// The last coding of a Transfer-Encoding line (RFC 9112 §6.1): chunked or not.
bool last_coding_is_chunked(std::string_view value) {
    auto comma = value.rfind(',');
    auto last = trim(comma == std::string_view::npos ? value : value.substr(comma + 1));
    return iequals(last, "chunked");
}

const char* read_status_line(std::string_view line, response_head& out) {
    // HTTP-version SP status-code [SP reason-phrase] (a missing SP before an empty reason is
    // accepted, as most clients do).
    constexpr std::string_view prefix = "HTTP/1.";
    if (line.size() < 12 || line.substr(0, prefix.size()) != prefix ||
        (line[7] != '0' && line[7] != '1') || line[8] != ' ')
        return "malformed status line";
    out.version = line[7] == '1' ? 11 : 10;
    unsigned status = 0;
    for (std::size_t i = 9; i < 12; ++i) {
        if (line[i] < '0' || line[i] > '9') return "malformed status code";
        status = status * 10 + static_cast<unsigned>(line[i] - '0');
    }
    if (status < 100) return "malformed status code";
    out.status = status;
    auto rest = line.substr(12);
    if (!rest.empty() && rest.front() != ' ') return "malformed status line";
    if (!rest.empty()) rest.remove_prefix(1);
    out.reason = rest;
    return nullptr;
}

// The framing facts of one field line.
const char* read_field(std::string_view name, std::string_view value, response_head& out) {
    switch (name.size()) {
        case 10:
            if (iequals(name, "Connection")) read_connection(value, out);
            break;
        case 14:
            if (iequals(name, "Content-Length")) {
                std::uint64_t n = 0;
                auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
                if (value.empty() || ec != std::errc() || end != value.data() + value.size())
                    return "invalid Content-Length";
                if (out.content_length && *out.content_length != n)
                    return "conflicting Content-Length";
                out.content_length = n;
            }
            break;
        case 17:
            if (iequals(name, "Transfer-Encoding")) {
                out.transfer_encoding = true;
                out.chunked = last_coding_is_chunked(value);
            }
            break;
        default:
            break;
    }
    return nullptr;
}

// What ended a run of value bytes that is not CRLF.
const char* line_end_problem(std::string_view data, std::size_t at) {
    char c = data[at];
    if (c == '\r') return "bare CR in header";
    if (c == '\n') return "bare LF in header";
    if (c == '\0') return "NUL in header";
    return "control byte in header";
}

}  // namespace

head_parse parse_response_head(std::string_view data, std::size_t max_bytes, response_head& out) {
    // Byte classes by table: each line is scanned once, name and value validated on the way.
    head_parse result;
    auto fail = [&result](const char* reason) {
        result.status = head_parse::state::malformed;
        result.reason = reason;
        return result;
    };
    auto incomplete = [&] {
        result.status =
            data.size() >= max_bytes ? head_parse::state::too_large : head_parse::state::incomplete;
        return result;
    };
    data = data.substr(0, max_bytes);
    out.fields.clear();
    out.content_length.reset();
    out.transfer_encoding = out.chunked = false;
    out.connection_close = out.connection_keep_alive = false;
    const std::size_t n = data.size();
    // Where a value run starting at `i` ends: the CR of its CRLF (npos: not all here yet).
    auto value_end = [&](std::size_t i, const char** problem) -> std::size_t {
        i = find_non_value(data, i);
        if (i == n) return std::string_view::npos;
        if (data[i] != '\r' || (i + 1 < n && data[i + 1] != '\n')) {
            *problem = line_end_problem(data, i);
            return i;
        }
        return i + 1 < n ? i : std::string_view::npos;
    };
    const char* problem = nullptr;
    std::size_t eol = value_end(0, &problem);
    if (problem) return fail(problem);
    if (eol == std::string_view::npos) return incomplete();
    if (eol == 0) return fail("empty status line");
    if (auto bad = read_status_line(data.substr(0, eol), out)) return fail(bad);
    std::size_t i = eol + 2;
    for (;;) {
        if (i >= n) return incomplete();
        if (data[i] == '\r') {
            if (i + 1 >= n) return incomplete();
            if (data[i + 1] != '\n') return fail("bare CR in header");
            // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and a message with both
            // "ought to be handled as an error" (a response splitting primitive otherwise).
            if (out.transfer_encoding && out.content_length)
                return fail("Content-Length with Transfer-Encoding");
            out.length = i + 2;
            result.status = head_parse::state::complete;
            return result;
        }
        if (data[i] == ' ' || data[i] == '\t') return fail("obsolete line folding in header");
        const std::size_t name_at = i;
        while (i < n && is_token_byte(data[i]))
            ++i;
        if (i == n) return incomplete();
        if (data[i] != ':') {
            if (data[i] == '\n' || data[i] == '\0' || data[i] == '\r')
                return fail(line_end_problem(data, i));
            return fail(i == name_at ? "header line without a field name"
                                     : "field name is not a token");
        }
        if (i == name_at) return fail("header line without a field name");
        auto name = data.substr(name_at, i - name_at);
        eol = value_end(i + 1, &problem);
        if (problem) return fail(problem);
        if (eol == std::string_view::npos) return incomplete();
        auto value = trim(data.substr(i + 1, eol - i - 1));
        out.fields.push_back({name, value});
        if (auto bad = read_field(name, value, out)) return fail(bad);
        i = eol + 2;
    }
}

}  // namespace rategate::gateway::h1
