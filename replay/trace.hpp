// The `rategate replay` trace (SPEC §1 "Replay"): JSON Lines, one request per line. Sans-I/O:
// the caller reads the lines and resolves routes against its config; this parses and checks
// each line and names the line number in every error.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rategate::replay {

/// One request of a trace as written (its route not yet resolved).
struct trace_line {
    double t_ms = 0;                   ///< virtual time, milliseconds since the Unix epoch
    std::optional<std::string> route;  ///< a route name; absent: route by method/path/host
    std::string method = "GET";        ///< only when `route` is absent
    std::string path;                  ///< non-empty when `route` is absent
    std::string host;                  ///< only when `route` is absent; "" = none
    std::optional<std::string> user;   ///< absent or null: no user id
    std::string ip;
    std::vector<std::pair<std::string, std::string>> headers;  ///< string values, in key order
    std::optional<double> cost;  ///< positive; absent: the route's cost

    /// The first header named `name` (ASCII case-insensitive), if any.
    std::optional<std::string_view> header(std::string_view name) const;
};

/// A malformed trace line. what() is "LINE: reason"; a reader prefixes the file name.
class trace_error : public std::runtime_error {
  public:
    trace_error(std::size_t line_no, const std::string& reason);
    std::size_t line_no() const { return line_no_; }
    const std::string& reason() const { return reason_; }

  private:
    std::size_t line_no_;
    std::string reason_;
};

/// True for a line of only spaces, tabs and CRs: it carries no request and is skipped.
bool is_blank(std::string_view line);

/// Parses one non-blank line (`line_no` counts from 1, for errors). Throws trace_error when the
/// line is not a JSON object, lacks a numeric `t_ms` in [0, 2^53 µs], has a field of the wrong
/// type, has neither `route` nor `path`, or a `cost` that is not in (0, 1e9].
trace_line parse_trace_line(std::string_view line, std::size_t line_no);

/// Parses a trace line after line: counts lines, skips blank ones and checks that `t_ms`
/// never goes backwards.
class trace_reader {
  public:
    /// The request on the next line, or nullopt for a blank line. Throws trace_error.
    std::optional<trace_line> next(std::string_view line);
    /// The number of the line last passed to next().
    std::size_t line_no() const { return line_no_; }

  private:
    std::size_t line_no_ = 0;
    std::optional<double> last_t_;
};

}  // namespace rategate::replay
