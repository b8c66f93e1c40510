#include "gateway/http/header_scan.hpp"

#include <algorithm>
#include <cctype>

#include "gateway/http/text.hpp"

namespace rategate::gateway {

namespace {

using h1::iequals;

using h1::trim;

}  // namespace

header_end find_header_end(std::string_view data, std::size_t from) {
    header_end out;
    for (std::size_t i = from; i < data.size(); ++i) {
        char c = data[i];
        if (c == '\n') {
            if (i == 0 || data[i - 1] != '\r') {
                out.status = header_end::state::malformed;
                out.reason = "bare LF in header";
                return out;
            }
            if (i >= 3 && data[i - 2] == '\n' && data[i - 3] == '\r') {
                out.status = header_end::state::complete;
                out.length = i + 1;
                return out;
            }
        } else if (c == '\0') {
            out.status = header_end::state::malformed;
            out.reason = "NUL in header";
            return out;
        }
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
        for (char c : line) {
            if (c == '\r') return "bare CR in header";
            if (c == '\0') return "NUL in header";
            if (c == '\n') return "bare LF in header";
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
