// libFuzzer harness: a client's request head through the header scanner, Beast's parser and
// the request normaliser, as the session runs them. Invariants: the scanner agrees with itself
// fed in two pieces; a normalised path is absolute, free of dot segments, empty segments and
// escapes of unreserved characters, and normalising it again changes nothing.
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gateway/http/header_scan.hpp"
#include "gateway/http/request_normaliser.hpp"
#include "gateway/proxy/request_facts.hpp"

namespace h1 = rategate::gateway::h1;
namespace http = boost::beast::http;

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

bool is_unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

void check_normal_path(std::string_view p) {
    check(!p.empty() && p.front() == '/');
    check(p.find("//") == std::string_view::npos);
    check(p.find("/./") == std::string_view::npos && p.find("/../") == std::string_view::npos);
    check(!p.ends_with("/.") && !p.ends_with("/.."));
    for (std::size_t i = 0; i < p.size(); ++i)
        if (p[i] == '%') {
            check(i + 2 < p.size());
            auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
            check(hex(p[i + 1]) && hex(p[i + 2]));
            auto byte = std::strtol(std::string(p.substr(i + 1, 2)).c_str(), nullptr, 16);
            check(!is_unreserved(static_cast<unsigned char>(byte)));
        }
    auto again = h1::normalise_path(p);
    check(again && *again == p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);

    // Any byte string that looks like a path goes through the path normaliser directly.
    if (!in.empty() && in.front() == '/' && in.find('?') == std::string_view::npos)
        if (auto p = h1::normalise_path(in)) check_normal_path(*p);

    auto whole = rategate::gateway::find_header_end(in, 0);
    // Fed in two pieces (resuming where the scanner said), the verdict is the same.
    auto split = size / 2;
    auto first = rategate::gateway::find_header_end(in.substr(0, split), 0);
    if (first.status == rategate::gateway::header_end::state::incomplete) {
        auto second = rategate::gateway::find_header_end(in, first.resume);
        check(second.status == whole.status);
        if (whole.status == rategate::gateway::header_end::state::complete)
            check(second.length == whole.length);
    }
    if (whole.status != rategate::gateway::header_end::state::complete) return 0;
    auto block = in.substr(0, whole.length);
    if (!rategate::gateway::check_header_block(block).empty()) return 0;

    http::request_parser<http::empty_body> parser;
    parser.eager(false);
    boost::system::error_code ec;
    parser.put(boost::asio::buffer(block.data(), block.size()), ec);
    if (ec || !parser.is_header_done()) return 0;
    const auto& req = parser.get();
    // Framing: what the gateway forwards by (its facts) is what Beast read the body by, for
    // every block check_header_block lets through (else: request smuggling).
    check(rategate::gateway::read_request_facts(req).chunked == parser.chunked());
    h1::request_line line{req.method_string(), req.target(), req.version(), 0, {}};
    for (auto it = req.find(http::field::host); it != req.end() && it->name() == http::field::host;
         ++it)
        if (line.host_count++ == 0) line.host = it->value();
    auto r = h1::normalise_request(line);
    check(r.request.has_value() != r.error.has_value());
    if (r.error) {
        check(r.error->status == 400 || r.error->status == 405);
        return 0;
    }
    check_normal_path(r.request->path);
    for (char c : r.request->host_name())
        check(!(c >= 'A' && c <= 'Z'));
    check(line.version < 11 || !r.request->host.empty());
    return 0;
}
