// libFuzzer harness for gateway/header_scan: find_header_end fed in pieces agrees with one call
// over the whole input, and a block that check_header_block accepts has none of the smuggling
// vectors SPEC §3 "Strict parsing" names.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gateway/http/header_scan.hpp"

using rategate::gateway::check_header_block;
using rategate::gateway::find_header_end;
using rategate::gateway::header_end;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

bool same(const header_end& a, const header_end& b) {
    if (a.status != b.status) return false;
    if (a.status == header_end::state::complete) return a.length == b.length;
    if (a.status == header_end::state::malformed) return std::string_view(a.reason) == b.reason;
    return true;
}

// Feeds growing prefixes of `data` as reads would deliver them: chunk sizes from `step(i)`.
template <class Step>
header_end incremental(std::string_view data, Step step) {
    header_end r;
    std::size_t have = 0, i = 0;
    do {
        have = std::min(data.size(), have + step(i++));
        r = find_header_end(data.substr(0, have), r.resume);
        require(r.resume <= have);
        if (r.status != header_end::state::incomplete) return r;
    } while (have < data.size());
    return r;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

// Independent checks of an accepted block: CRLF-only line ends, no NUL, no obs-fold, field
// names without whitespace, never both framing headers, a digits-only Content-Length.
void check_accepted(std::string_view block) {
    bool cl = false, te = false;
    std::size_t pos = block.find("\r\n") + 2;  // the request line is Beast's to validate
    for (std::size_t i = 0; i < block.size(); ++i) {
        require(block[i] != '\0');
        if (block[i] == '\r') require(i + 1 < block.size() && block[i + 1] == '\n');
        if (block[i] == '\n') require(i > 0 && block[i - 1] == '\r');
    }
    while (pos < block.size()) {
        auto eol = block.find("\r\n", pos);
        auto line = block.substr(pos, eol - pos);
        pos = eol + 2;
        if (line.empty()) break;
        require(line[0] != ' ' && line[0] != '\t');
        auto colon = line.find(':');
        require(colon != std::string_view::npos && colon > 0);
        auto name = line.substr(0, colon);
        require(name.find_first_of(" \t") == std::string_view::npos);
        if (iequals(name, "content-length")) {
            require(!cl);
            cl = true;
            auto v = line.substr(colon + 1);
            auto first = v.find_first_not_of(" \t"), last = v.find_last_not_of(" \t");
            require(first != std::string_view::npos);
            for (auto c : v.substr(first, last - first + 1))
                require(c >= '0' && c <= '9');
        }
        if (iequals(name, "transfer-encoding")) te = true;
    }
    require(!(cl && te));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);

    auto whole = find_header_end(in, 0);
    require(whole.resume <= in.size());
    // One byte per read, and reads sized by the input's own bytes (the fuzzer steers them).
    require(same(whole, incremental(in, [](std::size_t) { return std::size_t{1}; })));
    require(same(whole, incremental(in, [&](std::size_t i) {
                     return size ? 1 + static_cast<std::size_t>(data[i % size] % 64) : 1;
                 })));

    switch (whole.status) {
        case header_end::state::complete: {
            require(whole.length >= 4 && whole.length <= in.size());
            auto block = in.substr(0, whole.length);
            require(block.substr(block.size() - 4) == "\r\n\r\n");
            require(block.find("\r\n\r\n") == block.size() - 4);  // the first end, not a later one
            auto why = check_header_block(block);
            if (why.empty()) check_accepted(block);
            break;
        }
        case header_end::state::malformed:
            require(*whole.reason != '\0');
            break;
        case header_end::state::incomplete:
            require(in.find("\r\n\r\n") == std::string_view::npos);
            break;
    }
    // Any bytes at all, not only scanned blocks: must not crash.
    (void)check_header_block(in);
    return 0;
}
