#include "gateway/http/header_scan.hpp"

#include <algorithm>

#include "gateway/http/text.hpp"

namespace rategate::gateway {

namespace {

using h1::find_line_stop;
using h1::iequals;
using h1::is_tchar;
using h1::trim;

}  // namespace

header_end find_header_end(std::string_view data, std::size_t from) {
    header_end out;
    // From one CR, LF or NUL to the next, eight bytes at a time: a NUL anywhere and a LF without
    // its CR are malformed at once (a bare CR is check_header_block's to refuse).
    for (std::size_t i = std::min(from, data.size());; ++i) {
        i = find_line_stop(data, i);
        if (i == data.size()) break;
        if (data[i] == '\0') {
            out.status = header_end::state::malformed;
            out.reason = "NUL in header";
            return out;
        }
        if (data[i] != '\n') continue;
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
    }
    // Resume a few bytes back so a CRLFCRLF split across reads is still found.
    out.resume = data.size() > 3 ? data.size() - 3 : 0;
    return out;
}

std::string check_header_block(std::string_view block) {
    if (block.size() < 4 || block.substr(block.size() - 4) != "\r\n\r\n")
        return "incomplete header block";
    bool content_length = false, transfer_encoding = false;
    std::size_t pos = 0;
    bool first = true;
    // One pass: each line is scanned to its first CR, LF or NUL (eight bytes at a time), which
    // must be the CR of its CRLF; the block's final CRLF guarantees one is found.
    while (pos < block.size()) {
        std::size_t stop = find_line_stop(block, pos);
        if (stop == block.size()) break;  // not reached: the block ends in CRLF
        if (block[stop] == '\0') return "NUL in header";
        if (block[stop] == '\n') return "bare LF in header";
        if (stop + 1 >= block.size() || block[stop + 1] != '\n') return "bare CR in header";
        std::string_view line = block.substr(pos, stop - pos);
        pos = stop + 2;
        // An empty first line would end the block before any field was checked.
        if (line.empty() && first) return "empty request line";
        if (line.empty()) break;  // end of block
        if (first) {
            first = false;
            continue;  // request line: Beast validates method, target and version
        }
        if (line.front() == ' ' || line.front() == '\t') return "obsolete line folding in header";
        auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return "header line without a field name";
        auto name = line.substr(0, colon);
        for (char c : name)
            if (c == ' ' || c == '\t') return "whitespace before colon in header";
        if (name.size() == 14 && iequals(name, "Content-Length")) {
            auto value = trim(line.substr(colon + 1));
            if (content_length) return "repeated Content-Length";
            content_length = true;
            if (value.empty() || value.size() > 19 ||
                !std::all_of(value.begin(), value.end(),
                             [](char c) { return c >= '0' && c <= '9'; }))
                return "invalid Content-Length";
        } else if (name.size() == 17 && iequals(name, "Transfer-Encoding")) {
            auto value = trim(line.substr(colon + 1));
            if (transfer_encoding) return "repeated Transfer-Encoding";
            transfer_encoding = true;
            if (auto why = check_transfer_encoding(value); !why.empty()) return why;
        }
    }
    if (content_length && transfer_encoding) return "both Content-Length and Transfer-Encoding";
    return {};
}

std::string check_transfer_encoding(std::string_view value) {
    bool chunked_seen = false;
    for (std::size_t from = 0;;) {
        auto comma = value.find(',', from);
        auto coding =
            trim(value.substr(from, comma == std::string_view::npos ? value.npos : comma - from));
        if (coding.empty() || !std::all_of(coding.begin(), coding.end(), is_tchar))
            return "invalid Transfer-Encoding";
        bool chunked = iequals(coding, "chunked");
        if (chunked && chunked_seen) return "Transfer-Encoding applies chunked twice";
        chunked_seen = chunked_seen || chunked;
        if (comma == std::string_view::npos) {
            if (!chunked) return "Transfer-Encoding must end with chunked";
            return {};
        }
        from = comma + 1;
    }
}

}  // namespace rategate::gateway
