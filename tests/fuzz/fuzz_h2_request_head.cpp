// libFuzzer harness for gateway/http2/request_head: an HTTP/2 header block as decoded fields
// (one per line, name and value split at the first NUL) never crashes the builder, the size is
// RFC 9113's measure, and a head the builder accepts is one the HTTP/1.1 path can take: a
// method, an origin-form target (or "*"), one Host, lower-case token names, no
// connection-specific field and one content-length.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gateway/http2/request_head.hpp"

using rategate::gateway::http2::request_head_builder;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    const std::size_t max = 512;
    request_head_builder b(max);
    std::size_t measured = 0;
    bool flood = false, malformed = false;
    while (!in.empty() && !flood) {
        auto eol = in.find('\n');
        auto line = in.substr(0, eol);
        in = eol == std::string_view::npos ? std::string_view{} : in.substr(eol + 1);
        auto nul = line.find('\0');
        auto name = line.substr(0, nul);
        auto value = nul == std::string_view::npos ? std::string_view{} : line.substr(nul + 1);
        measured += name.size() + value.size() + 32;
        auto r = b.add(name, value);
        require(b.size() == measured);
        flood = r == request_head_builder::field_status::flood;
        require(flood == (measured > 4 * max));
        malformed |= r == request_head_builder::field_status::malformed;
        // Once malformed, the block stays malformed.
        require(!malformed || r != request_head_builder::field_status::ok);
    }
    if (flood) return 0;
    auto status = b.finish();
    if (malformed) require(status == request_head_builder::head_status::malformed);
    if (status != request_head_builder::head_status::ok) return 0;
    require(measured <= max);
    auto& h = b.head();
    require(!h.method_string().empty());
    auto target = h.target();
    require(!target.empty() && (target.front() == '/' || target == "*"));
    std::size_t hosts = 0, lengths = 0;
    for (const auto& f : h) {
        auto n = f.name_string();
        require(!n.empty() && n.front() != ':');
        for (char c : n)
            require(!(c >= 'A' && c <= 'Z') || n == "Host" || n == "Cookie");
        require(n != "connection" && n != "transfer-encoding" && n != "upgrade" &&
                n != "keep-alive" && n != "proxy-connection");
        for (char c : f.value())
            require(c != '\r' && c != '\n' && c != '\0');
        hosts += n == "host" || n == "Host";
        lengths += n == "content-length";
    }
    require(hosts == 1);
    require(lengths <= 1);
    return 0;
}
