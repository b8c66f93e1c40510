#include "replay/trace.hpp"

#include "config/config.hpp"

#include <cctype>
#include <nlohmann/json.hpp>

namespace rategate::replay {

using json = nlohmann::json;

namespace {

constexpr double max_t_ms = 9007199254740.991;  // 2^53 µs
constexpr long long max_t_ms_whole = 9007199254740;

bool iequals_ascii(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

}  // namespace

std::optional<std::string_view> trace_line::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (iequals_ascii(k, name)) return std::string_view(v);
    return std::nullopt;
}

trace_error::trace_error(std::size_t line_no, const std::string& reason)
    : std::runtime_error(std::to_string(line_no) + ": " + reason),
      line_no_(line_no),
      reason_(reason) {}

bool is_blank(std::string_view line) {
    return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

trace_line parse_trace_line(std::string_view line, std::size_t line_no) {
    auto fail = [line_no](const std::string& why) { throw trace_error(line_no, why); };
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("not a JSON object");
    trace_line out;
    auto t = j.find("t_ms");
    if (t == j.end() || !t->is_number()) fail("\"t_ms\" (number) is required");
    out.t_ms = t->get<double>();
    // The virtual clock counts whole microseconds in a double: past 2^53 µs (the year 2255) they
    // are no longer exact, and a time such as 1e308 ms is infinite in µs (a limiter's window
    // index from it crashed the replay). Before the epoch is no time a gateway ever sees.
    if (!(out.t_ms >= 0 && out.t_ms <= max_t_ms))
        fail("\"t_ms\" must be between 0 and " + std::to_string(max_t_ms_whole) +
             " (milliseconds since the Unix epoch)");
    // A string field that may be absent; present, it must be a string.
    auto string_field = [&](const char* key) -> std::optional<std::string> {
        auto it = j.find(key);
        if (it == j.end()) return std::nullopt;
        if (!it->is_string()) fail(std::string("\"") + key + "\" must be a string");
        return it->get<std::string>();
    };
    if (auto route = string_field("route")) {
        out.route = std::move(*route);
    } else {
        out.path = string_field("path").value_or("");
        if (out.path.empty())
            fail("needs \"route\", or \"path\" (with optional \"method\", \"host\")");
        out.method = string_field("method").value_or("GET");
        out.host = string_field("host").value_or("");
    }
    if (auto u = j.find("user"); u != j.end() && !u->is_null()) out.user = string_field("user");
    out.ip = string_field("ip").value_or("");
    if (auto h = j.find("headers"); h != j.end()) {
        if (!h->is_object()) fail("\"headers\" must be an object");
        for (auto it = h->begin(); it != h->end(); ++it)
            if (it->is_string()) out.headers.emplace_back(it.key(), it->get<std::string>());
    }
    if (auto c = j.find("cost"); c != j.end()) {
        if (!c->is_number() || c->get<double>() <= 0) fail("\"cost\" must be a positive number");
        // As a route's `cost` (config/routes.cpp): beyond it, waits and retries overflow (a cost
        // of 1e308 printed "retry_after_ms":inf, which is not JSON).
        if (c->get<double>() > static_cast<double>(config::max_cost))
            fail("\"cost\" must be at most " + std::to_string(config::max_cost));
        out.cost = c->get<double>();
    }
    return out;
}

std::optional<trace_line> trace_reader::next(std::string_view line) {
    ++line_no_;
    if (is_blank(line)) return std::nullopt;
    auto out = parse_trace_line(line, line_no_);
    if (last_t_ && out.t_ms < *last_t_) throw trace_error(line_no_, "\"t_ms\" goes backwards");
    last_t_ = out.t_ms;
    return out;
}

}  // namespace rategate::replay
