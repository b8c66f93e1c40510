// The JSON reader's helpers: see json_reader.hpp.
#include "config/json_reader.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/units.hpp"

namespace rategate::config::detail {

std::string child(const std::string& base, const std::string& key) {
    return base.empty() ? key : base + "." + key;
}
std::string element(const std::string& base, std::size_t i) {
    return base + "[" + std::to_string(i) + "]";
}

const char* type_name(const json& j) {
    switch (j.type()) {
        case json::value_t::null:
            return "null";
        case json::value_t::object:
            return "an object";
        case json::value_t::array:
            return "an array";
        case json::value_t::string:
            return "a string";
        case json::value_t::boolean:
            return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return "an integer";
        case json::value_t::number_float:
            return "a number";
        default:
            return "a value";
    }
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j)
        row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t prev = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t cur = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, prev + (a[i - 1] != b[j - 1])});
            prev = cur;
        }
    }
    return row[b.size()];
}

std::optional<std::string> read_string(const json* j, const std::string& path, checker& c,
                                       bool allow_empty) {
    if (!j) return std::nullopt;
    if (!j->is_string()) {
        c.fail(path, std::string("expected a string, got ") + type_name(*j));
        return std::nullopt;
    }
    auto s = j->get<std::string>();
    if (s.empty() && !allow_empty) {
        c.fail(path, "must not be empty");
        return std::nullopt;
    }
    return s;
}

std::optional<bool> read_bool(const json* j, const std::string& path, checker& c) {
    if (!j) return std::nullopt;
    if (!j->is_boolean()) {
        c.fail(path, std::string("expected true or false, got ") + type_name(*j));
        return std::nullopt;
    }
    return j->get<bool>();
}

std::optional<std::int64_t> read_int(const json* j, const std::string& path, checker& c,
                                     std::int64_t min, std::int64_t max) {
    if (!j) return std::nullopt;
    std::int64_t v = 0;
    if (j->is_number_integer()) {
        v = j->get<std::int64_t>();
    } else if (j->is_number_float() && std::floor(j->get<double>()) == j->get<double>() &&
               std::fabs(j->get<double>()) < 9e15) {
        v = static_cast<std::int64_t>(j->get<double>());
    } else {
        c.fail(path, std::string("expected an integer, got ") + type_name(*j));
        return std::nullopt;
    }
    if (v < min || v > max) {
        c.fail(path, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                         ", got " + std::to_string(v));
        return std::nullopt;
    }
    return v;
}

/// A positive finite number (rates, bursts, capacities).
std::optional<double> read_positive(const json* j, const std::string& path, checker& c, double min,
                                    bool min_inclusive) {
    if (!j) return std::nullopt;
    if (!j->is_number()) {
        c.fail(path, std::string("expected a number, got ") + type_name(*j));
        return std::nullopt;
    }
    double v = j->get<double>();
    if (!std::isfinite(v) || (min_inclusive ? v < min : v <= min)) {
        std::ostringstream o;
        o << "must be " << (min_inclusive ? ">= " : "> ") << min << ", got " << j->dump();
        c.fail(path, o.str());
        return std::nullopt;
    }
    return v;
}

/// A duration: a string such as "250ms" or an integer number of milliseconds.
std::optional<micros> read_duration(const json* j, const std::string& path, checker& c,
                                    bool allow_zero) {
    if (!j) return std::nullopt;
    std::optional<micros> d;
    if (j->is_number_integer()) {
        auto ms = j->get<std::int64_t>();
        if (ms < 0 || ms > 1'000'000'000'000) {
            c.fail(path, "duration must be a non-negative number of milliseconds");
            return std::nullopt;
        }
        d = micros(ms * 1000);
    } else if (j->is_string()) {
        std::string err;
        d = parse_duration(j->get<std::string>(), err);
        if (!d) {
            c.fail(path, err);
            return std::nullopt;
        }
    } else {
        c.fail(path,
               std::string("expected a duration such as \"250ms\" or integer milliseconds, got ") +
                   type_name(*j));
        return std::nullopt;
    }
    if (!allow_zero && d->count() == 0) {
        c.fail(path, "duration must be greater than zero");
        return std::nullopt;
    }
    return d;
}

std::optional<millis> read_millis(const json* j, const std::string& path, checker& c) {
    auto d = read_duration(j, path, c);
    if (!d) return std::nullopt;
    if (d->count() % 1000 != 0) {
        c.fail(path, "must be a whole number of milliseconds");
        return std::nullopt;
    }
    return std::chrono::duration_cast<millis>(*d);
}

std::optional<std::uint64_t> read_size(const json* j, const std::string& path, checker& c,
                                       std::uint64_t min) {
    if (!j) return std::nullopt;
    std::optional<std::uint64_t> v;
    if (j->is_number_integer()) {
        auto i = j->get<std::int64_t>();
        if (i >= 0) v = static_cast<std::uint64_t>(i);
    } else if (j->is_string()) {
        std::string err;
        v = parse_size(j->get<std::string>(), err);
        if (!v) {
            c.fail(path, err);
            return std::nullopt;
        }
    } else {
        c.fail(path, std::string("expected a size such as \"10MiB\" or integer bytes, got ") +
                         type_name(*j));
        return std::nullopt;
    }
    if (!v || *v < min) {
        c.fail(path, "size must be at least " + std::to_string(min) + " bytes");
        return std::nullopt;
    }
    return v;
}

bool is_ip_literal(const std::string& s, std::vector<std::uint8_t>* bytes) {
    unsigned char buf[16];
    if (inet_pton(AF_INET, s.c_str(), buf) == 1) {
        if (bytes) bytes->assign(buf, buf + 4);
        return true;
    }
    if (inet_pton(AF_INET6, s.c_str(), buf) == 1) {
        if (bytes) bytes->assign(buf, buf + 16);
        return true;
    }
    return false;
}

bool is_hostname(const std::string& s) {
    if (s.empty() || s.size() > 253) return false;
    return std::all_of(s.begin(), s.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.' || ch == '_';
    });
}

std::optional<host_port_text> split_host_port(const std::string& s) {
    host_port_text out;
    if (!s.empty() && s[0] == '[') {
        auto close = s.find(']');
        if (close == std::string::npos) return std::nullopt;
        out.host = s.substr(1, close - 1);
        out.bracketed = true;
        if (close + 1 < s.size()) {
            if (s[close + 1] != ':') return std::nullopt;
            out.port = s.substr(close + 2);
        }
        return out;
    }
    auto colon = s.find(':');
    if (colon == std::string::npos) {
        out.host = s;
    } else {
        if (s.find(':', colon + 1) != std::string::npos) return std::nullopt;
        out.host = s.substr(0, colon);
        out.port = s.substr(colon + 1);
    }
    return out;
}

std::optional<std::uint16_t> port_number(const std::string& text) {
    if (text.empty() || text.size() > 5 || !std::all_of(text.begin(), text.end(), ::isdigit))
        return std::nullopt;
    int port = std::stoi(text);
    if (port < 1 || port > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(port);
}

/// "host:port" or "[v6]:port". `listen` addresses must be IP literals (or "localhost").
std::optional<host_port> read_host_port(const json* j, const std::string& path, checker& c,
                                        bool listen) {
    auto s = read_string(j, path, c);
    if (!s) return std::nullopt;
    auto parts = split_host_port(*s);
    if (!parts || !parts->port) {
        const bool bracketed = !s->empty() && (*s)[0] == '[';
        c.fail(path, std::string("expected \"") + (bracketed ? "[ipv6]:port" : "host:port") +
                         "\", got \"" + *s + "\"");
        return std::nullopt;
    }
    auto port = port_number(*parts->port);
    if (!port) {
        c.fail(path, "port must be 1..65535 in \"" + *s + "\"");
        return std::nullopt;
    }
    host_port hp;
    hp.host = std::move(parts->host);
    hp.port = *port;
    if (listen) {
        if (hp.host == "localhost") hp.host = "127.0.0.1";
        if (hp.host == "*" || hp.host.empty()) hp.host = "0.0.0.0";
        if (!is_ip_literal(hp.host)) {
            c.fail(path, "listen address must be an IP address, got \"" + hp.host + "\"");
            return std::nullopt;
        }
    } else if (!is_ip_literal(hp.host) && !is_hostname(hp.host)) {
        c.fail(path, "invalid host \"" + hp.host + "\"");
        return std::nullopt;
    }
    return hp;
}

bool is_token(const std::string& s) {
    static const std::string extra = "!#$%&'*+-.^_`|~";
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || extra.find(ch) != std::string::npos;
    });
}

// A file path from the config: relative paths are relative to the config file's folder; the
// file must be readable. Returns the absolute path, or nullopt with an error.
std::optional<std::string> read_file_path(const json* j, const std::string& path, checker& c,
                                          std::string* contents) {
    auto s = read_string(j, path, c);
    if (!s) return std::nullopt;
    std::filesystem::path p(*s);
    if (p.is_relative() && !c.base_dir.empty()) p = std::filesystem::path(c.base_dir) / p;
    std::ifstream in(p, std::ios::binary);
    if (!in) {
        c.fail(path, "cannot read \"" + p.string() + "\"");
        return std::nullopt;
    }
    if (contents) {
        std::stringstream ss;
        ss << in.rdbuf();
        *contents = ss.str();
    }
    return p.string();
}

}  // namespace rategate::config::detail
