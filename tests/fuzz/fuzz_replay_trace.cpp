// libFuzzer harness for the replay trace reader (replay/trace.hpp): every line either parses
// into a request that honours SPEC §1 "Replay" or throws trace_error naming that line; any other
// exception or a crash is a finding. Times of accepted lines never go backwards.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "replay/trace.hpp"

using namespace rategate::replay;

namespace {

void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    trace_reader reader;
    double last = -INFINITY;
    std::size_t lines = 0;
    while (!in.empty()) {
        auto nl = in.find('\n');
        auto line = in.substr(0, nl);
        in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
        ++lines;
        try {
            auto req = reader.next(line);
            require(reader.line_no() == lines, "the reader counts every line");
            if (!req) {
                require(is_blank(line), "only blank lines are skipped");
                continue;
            }
            require(!is_blank(line), "a blank line carries no request");
            require(req->t_ms >= last, "t_ms never goes backwards");
            last = req->t_ms;
            require(req->route || !req->path.empty(), "a route name or a path");
            require(!req->cost || (*req->cost > 0 && *req->cost <= 1e9), "cost is in (0, 1e9]");
            require(req->t_ms >= 0 && req->t_ms <= 9007199254740.991, "t_ms is exact in µs");
            for (const auto& [name, value] : req->headers)
                require(req->header(name).has_value(), "every header can be looked up");
        } catch (const trace_error& e) {
            require(e.line_no() == lines, "trace_error names the line");
            require(!e.reason().empty(), "trace_error says why");
            return 0;  // replay stops at the first bad line
        } catch (const std::exception& e) {
            std::fprintf(stderr, "the trace reader threw %s: %s\n", typeid(e).name(), e.what());
            std::abort();
        }
    }
    return 0;
}
