#include "gateway/http/header_scan.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "gateway/http/text.hpp"

namespace rategate::gateway {

namespace {

using h1::iequals;

using h1::trim;

}  // namespace

header_end find_header_end(std::string_view data, std::size_t from) {
    header_end out;
    // Line by line with memchr: a NUL anywhere and a LF without its CR are malformed at once.
    const char* begin = data.data();
    std::size_t i = std::min(from, data.size());
    while (i < data.size()) {
        const void* lf = std::memchr(begin + i, '\n', data.size() - i);
        std::size_t end =
            lf ? static_cast<std::size_t>(static_cast<const char*>(lf) - begin) : data.size();
        if (std::memchr(begin + i, '\0', end - i)) {
            out.status = header_end::state::malformed;
            out.reason = "NUL in header";
            return out;
        }
        if (!lf) break;
        if (end == 0 || data[end - 1] != '\r') {
            out.status = header_end::state::malformed;
            out.reason = "bare LF in header";
            return out;
        }
        if (end >= 3 && data[end - 2] == '\n' && data[end - 3] == '\r') {
            out.status = header_end::state::complete;
            out.length = end + 1;
            return out;
        }
        i = end + 1;
    }
    // Resume a few bytes back so a CRLFCRLF split across reads is still found.
    out.resume = data.size() > 3 ? data.size() - 3 : 0;
    return out;
}

std::string check_header_block(std::string_view block) {
    if (block.size() < 4 || block.substr(block.size() - 4) != "\r\n\r\n")
        return "incomplete header block";
    bool content_length = false, transfer_encoding = false;
    std::string_view content_length_value;
    std::size_t pos = 0;
    bool first = true;
    while (pos < block.size()) {
        auto eol = block.find("\r\n", pos);
        std::string_view line = block.substr(pos, eol - pos);
        pos = eol + 2;
        // An empty first line would end the block before any field was checked.
        if (line.empty() && first) return "empty request line";
        if (line.empty()) break;  // end of block
        // A line ends at CRLF: any CR, LF or NUL left inside it is bare (first one reported).
        const char* bad = nullptr;
        for (char c : {'\r', '\0', '\n'})
            if (auto* at = static_cast<const char*>(std::memchr(line.data(), c, line.size()));
                at && (!bad || at < bad))
                bad = at;
        if (bad) {
            if (*bad == '\r') return "bare CR in header";
            if (*bad == '\0') return "NUL in header";
            return "bare LF in header";
        }
        if (first) {
            first = false;
            continue;  // request line: Beast validates method, target and version
        }
        if (line.front() == ' ' || line.front() == '\t') return "obsolete line folding in header";
        auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return "header line without a field name";
        auto name = line.substr(0, colon);
        if (name.find_first_of(" \t") != std::string_view::npos)
            return "whitespace before colon in header";
        auto value = trim(line.substr(colon + 1));
        if (iequals(name, "Content-Length")) {
            if (content_length) return "repeated Content-Length";
            content_length = true;
            content_length_value = value;
            if (value.empty() || value.size() > 19 ||
                !std::all_of(value.begin(), value.end(),
                             [](char c) { return c >= '0' && c <= '9'; }))
                return "invalid Content-Length";
        } else if (iequals(name, "Transfer-Encoding")) {
            if (transfer_encoding) return "repeated Transfer-Encoding";
            transfer_encoding = true;
            auto last = value.rfind(',');
            auto coding = trim(last == std::string_view::npos ? value : value.substr(last + 1));
            if (!iequals(coding, "chunked")) return "Transfer-Encoding must end with chunked";
        }
    }
    if (content_length && transfer_encoding) return "both Content-Length and Transfer-Encoding";
    return {};
}

}  // namespace rategate::gateway
