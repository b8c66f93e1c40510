// The JSON reader under every config section: a checker that collects each problem with its
// JSON path, an object view that reports unknown keys (with a "did you mean" hint), and the typed
// read_* helpers. Internal to config/: the sections (server.cpp, redis.cpp, identity.cpp,
// upstreams.cpp, limiters.cpp, routes.cpp) and load.cpp use it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace rategate::config::detail {

using json = nlohmann::json;

/// `base.key`, or `key` at the root.
std::string child(const std::string& base, const std::string& key);
/// `base[i]`.
std::string element(const std::string& base, std::size_t i);
/// The JSON type of `j` as the messages name it ("an object", "a string", ...).
const char* type_name(const json& j);
/// Levenshtein distance, for "did you mean" hints.
std::size_t edit_distance(const std::string& a, const std::string& b);

/// Collects errors while walking the document.
class checker {
  public:
    std::vector<config_error> errors;
    std::string base_dir;  ///< the config file's folder, for relative paths
    void fail(const std::string& path, std::string message) {
        errors.push_back({path.empty() ? "$" : path, std::move(message)});
    }
};

/// A view of one JSON object that remembers which keys were asked for, so that the
/// rest can be reported as unknown (typos must not pass silently).
class object_reader {
  public:
    object_reader(const json& j, std::string path, checker& c)
        : j_(j), path_(std::move(path)), c_(c), valid_(j.is_object()) {
        if (!valid_) c_.fail(path_, std::string("expected an object, got ") + type_name(j));
    }
    bool valid() const { return valid_; }
    std::string path(const std::string& key) const { return child(path_, key); }

    const json* get(const std::string& key, bool required = false) {
        known_.insert(key);
        if (!valid_) return nullptr;
        auto it = j_.find(key);
        if (it == j_.end()) {
            if (required) c_.fail(path(key), "is required");
            return nullptr;
        }
        return &*it;
    }

    /// Reports every key that no get() asked for.
    void finish() {
        if (!valid_) return;
        for (auto it = j_.begin(); it != j_.end(); ++it) {
            if (known_.count(it.key())) continue;
            std::string msg = "unknown key \"" + it.key() + "\"";
            std::string best;
            std::size_t best_d = 3;
            for (const auto& k : known_) {
                auto d = edit_distance(it.key(), k);
                if (d < best_d) best_d = d, best = k;
            }
            if (!best.empty()) msg += " (did you mean \"" + best + "\"?)";
            c_.fail(path(it.key()), msg);
        }
    }

  private:
    const json& j_;
    std::string path_;
    checker& c_;
    std::set<std::string> known_;
    bool valid_;
};

/// A string; empty is an error unless `allow_empty`. nullopt when `j` is absent or bad.
std::optional<std::string> read_string(const json* j, const std::string& path, checker& c,
                                       bool allow_empty = false);

std::optional<bool> read_bool(const json* j, const std::string& path, checker& c);

/// An integer in [min, max] (a float with an integral value passes too).
std::optional<std::int64_t> read_int(const json* j, const std::string& path, checker& c,
                                     std::int64_t min, std::int64_t max);

/// A positive finite number (rates, bursts, capacities).
std::optional<double> read_positive(const json* j, const std::string& path, checker& c,
                                    double min = 0, bool min_inclusive = false);

/// A duration: a string such as "250ms" or an integer number of milliseconds. Returns µs.
std::optional<micros> read_duration(const json* j, const std::string& path, checker& c,
                                    bool allow_zero = false);

/// A duration that is a whole number of milliseconds.
std::optional<millis> read_millis(const json* j, const std::string& path, checker& c);

/// A size: a string such as "10MiB" or integer bytes, at least `min` bytes.
std::optional<std::uint64_t> read_size(const json* j, const std::string& path, checker& c,
                                       std::uint64_t min);

/// True for an IPv4 or IPv6 literal; its 4 or 16 bytes go to `bytes` when given.
bool is_ip_literal(const std::string& s, std::vector<std::uint8_t>* bytes = nullptr);
bool is_hostname(const std::string& s);

/// The parts of "host", "host:port", "[v6]" or "[v6]:port" as written (no check of the name or
/// the port's digits); nullopt for any other shape: an unclosed '[', a ']' followed by other
/// than ':', or more than one ':' outside brackets.
struct host_port_text {
    std::string host;                 ///< without the brackets
    std::optional<std::string> port;  ///< the text after ':', when there is one
    bool bracketed = false;           ///< the host was written in brackets
};
std::optional<host_port_text> split_host_port(const std::string& s);

/// A port's text as a port: decimal digits only, 1..65535.
std::optional<std::uint16_t> port_number(const std::string& text);

/// "host:port" or "[v6]:port". `listen` addresses must be IP literals (or "localhost").
std::optional<host_port> read_host_port(const json* j, const std::string& path, checker& c,
                                        bool listen);

/// One of the names of `values` (a range of {name, value} pairs), as its value; anything else
/// is an error that lists the names.
template <class E, class Values>
std::optional<E> read_enum_of(const json* j, const std::string& path, checker& c,
                              const Values& values) {
    auto s = read_string(j, path, c);
    if (!s) return std::nullopt;
    std::string allowed;
    for (const auto& [name, value] : values) {
        if (*s == name) return value;
        allowed += std::string(allowed.empty() ? "" : ", ") + "\"" + name + "\"";
    }
    c.fail(path, "unknown value \"" + *s + "\" (expected one of " + allowed + ")");
    return std::nullopt;
}

/// read_enum_of() with the pairs written in place.
template <class E>
std::optional<E> read_enum(const json* j, const std::string& path, checker& c,
                           std::initializer_list<std::pair<const char*, E>> values) {
    return read_enum_of<E>(j, path, c, values);
}

/// An RFC 9110 token (header names, methods).
bool is_token(const std::string& s);

/// A file path from the config: relative paths are relative to the config file's folder; the
/// file must be readable (its bytes go to `contents` when given). Returns the absolute path.
std::optional<std::string> read_file_path(const json* j, const std::string& path, checker& c,
                                          std::string* contents = nullptr);

}  // namespace rategate::config::detail
