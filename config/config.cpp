// Loading and validation of the JSON config (SPEC §2). Every problem is collected with
// its JSON path so `rategate check` can report all of them at once.
#include "config/config.hpp"

#include "config/mask.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <boost/url/parse.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "config/units.hpp"

namespace rategate::config {

using json = nlohmann::json;

std::string host_port::to_string() const {
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

const char* to_string(algorithm a) {
    switch (a) {
        case algorithm::fixed_window:
            return "fixed_window";
        case algorithm::sliding_window_log:
            return "sliding_window_log";
        case algorithm::sliding_window_counter:
            return "sliding_window_counter";
        case algorithm::leaky_bucket:
            return "leaky_bucket";
        case algorithm::token_bucket:
            return "token_bucket";
        case algorithm::gcra:
            return "gcra";
        case algorithm::smooth_bursty:
            return "smooth_bursty";
        case algorithm::smooth_warming_up:
            return "smooth_warming_up";
    }
    return "?";
}

namespace {

std::string render(const std::string& file, const std::vector<config_error>& errors) {
    std::string out;
    for (const auto& e : errors)
        out += file + ": " + e.path + ": " + e.message + "\n";
    return out;
}

}  // namespace

config_errors::config_errors(std::string file, std::vector<config_error> errors)
    : std::runtime_error(render(file, errors)),
      file_(std::move(file)),
      errors_(std::move(errors)) {}

namespace {

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

std::optional<std::string> read_string(const json* j, const std::string& path, checker& c,
                                       bool allow_empty = false) {
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
std::optional<double> read_positive(const json* j, const std::string& path, checker& c,
                                    double min = 0, bool min_inclusive = false) {
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
                                    bool allow_zero = false) {
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

bool is_ip_literal(const std::string& s, std::vector<std::uint8_t>* bytes = nullptr) {
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

/// "host:port" or "[v6]:port". `listen` addresses must be IP literals (or "localhost").
std::optional<host_port> read_host_port(const json* j, const std::string& path, checker& c,
                                        bool listen) {
    auto s = read_string(j, path, c);
    if (!s) return std::nullopt;
    host_port hp;
    std::string port_text;
    if (!s->empty() && (*s)[0] == '[') {
        auto close = s->find(']');
        if (close == std::string::npos || close + 1 >= s->size() || (*s)[close + 1] != ':') {
            c.fail(path, "expected \"[ipv6]:port\", got \"" + *s + "\"");
            return std::nullopt;
        }
        hp.host = s->substr(1, close - 1);
        port_text = s->substr(close + 2);
    } else {
        auto colon = s->rfind(':');
        if (colon == std::string::npos || s->find(':') != colon) {
            c.fail(path, "expected \"host:port\", got \"" + *s + "\"");
            return std::nullopt;
        }
        hp.host = s->substr(0, colon);
        port_text = s->substr(colon + 1);
    }
    int port = 0;
    bool port_ok = !port_text.empty() && port_text.size() <= 5 &&
                   std::all_of(port_text.begin(), port_text.end(), ::isdigit);
    if (port_ok) port = std::stoi(port_text);
    if (!port_ok || port < 1 || port > 65535) {
        c.fail(path, "port must be 1..65535 in \"" + *s + "\"");
        return std::nullopt;
    }
    hp.port = static_cast<std::uint16_t>(port);
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

template <class E>
std::optional<E> read_enum(const json* j, const std::string& path, checker& c,
                           std::initializer_list<std::pair<const char*, E>> values) {
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

bool is_token(const std::string& s) {
    static const std::string extra = "!#$%&'*+-.^_`|~";
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || extra.find(ch) != std::string::npos;
    });
}

void read_limits(const json& j, const std::string& path, checker& c, limits_config& out) {
    object_reader o(j, path, c);
    if (auto v = read_size(o.get("max_header_bytes"), o.path("max_header_bytes"), c, 256))
        out.max_header_bytes = static_cast<std::size_t>(*v);
    if (auto v = read_size(o.get("max_body_bytes"), o.path("max_body_bytes"), c, 0))
        out.max_body_bytes = *v;
    if (auto v = read_millis(o.get("header_timeout"), o.path("header_timeout"), c))
        out.header_timeout = *v;
    if (auto v = read_millis(o.get("idle_timeout"), o.path("idle_timeout"), c))
        out.idle_timeout = *v;
    if (auto v = read_int(o.get("max_connections"), o.path("max_connections"), c, 1, 10'000'000))
        out.max_connections = static_cast<std::size_t>(*v);
    o.finish();
}

void read_sentinel(const json& j, const std::string& path, checker& c, sentinel_config& out) {
    object_reader o(j, path, c);
    if (auto v = read_string(o.get("master", true), o.path("master"), c)) {
        if (v->empty() || v->find_first_of(" \r\n") != std::string::npos)
            c.fail(o.path("master"), "expected the master's name as the sentinels know it");
        else
            out.master = *v;
    }
    auto nodes_path = o.path("nodes");
    if (const json* n = o.get("nodes", true)) {
        if (!n->is_array() || n->empty()) {
            c.fail(nodes_path, "expected a non-empty array of \"host:port\"");
        } else {
            for (std::size_t i = 0; i < n->size(); ++i)
                if (auto hp = read_host_port(&(*n)[i], element(nodes_path, i), c, false))
                    out.nodes.push_back(*hp);
        }
    }
    if (auto v = read_string(o.get("username"), o.path("username"), c)) out.username = *v;
    if (auto v = read_string(o.get("password"), o.path("password"), c)) out.password = *v;
    o.finish();
}

void read_cluster(const json& j, const std::string& path, checker& c, cluster_config& out) {
    object_reader o(j, path, c);
    auto nodes_path = o.path("nodes");
    if (const json* n = o.get("nodes", true)) {
        if (!n->is_array() || n->empty()) {
            c.fail(nodes_path, "expected a non-empty array of \"host:port\" seed nodes");
        } else {
            for (std::size_t i = 0; i < n->size(); ++i)
                if (auto hp = read_host_port(&(*n)[i], element(nodes_path, i), c, false))
                    out.nodes.push_back(*hp);
        }
    }
    o.finish();
}

void read_redis(const json& j, const std::string& path, checker& c, redis_config& out) {
    object_reader o(j, path, c);
    const json* url_j = o.get("url");
    const json* sentinel_j = o.get("sentinel");
    const json* cluster_j = o.get("cluster");
    int deployments = (url_j ? 1 : 0) + (sentinel_j ? 1 : 0) + (cluster_j ? 1 : 0);
    if (deployments != 1 && o.valid())
        c.fail(path, "needs exactly one of \"url\", \"sentinel\" or \"cluster\"");
    if (cluster_j) {
        out.url.clear();
        out.host.clear();
        out.port = 0;
        out.over_limit_cache = 0;
        out.cluster.emplace();
        read_cluster(*cluster_j, o.path("cluster"), c, *out.cluster);
    }
    if (sentinel_j) {
        out.url.clear();
        out.host.clear();
        out.port = 0;
        out.sentinel.emplace();
        read_sentinel(*sentinel_j, o.path("sentinel"), c, *out.sentinel);
    }
    if (const json* db = o.get("db")) {
        if (!sentinel_j)
            c.fail(o.path("db"), "only applies beside \"sentinel\" (the url names the database)");
        else if (auto v = read_int(db, o.path("db"), c, 0, 9999))
            out.db = static_cast<int>(*v);
    }
    if (auto url = read_string(url_j, o.path("url"), c)) {
        auto parsed = boost::urls::parse_uri(*url);
        if (!parsed || parsed->scheme() != "redis" || parsed->host().empty()) {
            c.fail(o.path("url"),
                   "expected redis://[:password@]host:port/db, got \"" + *url + "\"");
        } else {
            out.url = *url;
            out.host = parsed->host_address();
            if (!out.host.empty() && out.host.front() == '[')
                out.host = out.host.substr(1, out.host.size() - 2);
            out.port = parsed->has_port() ? parsed->port_number() : 6379;
            if (parsed->has_password()) out.password = parsed->password();
            if (parsed->has_userinfo() && !parsed->user().empty()) out.username = parsed->user();
            std::string db = parsed->path();
            if (!db.empty() && db.front() == '/') db.erase(0, 1);
            if (!db.empty()) {
                if (db.size() > 4 || !std::all_of(db.begin(), db.end(), ::isdigit))
                    c.fail(o.path("url"), "database in \"" + *url + "\" must be a number");
                else
                    out.db = std::stoi(db);
            }
        }
    }
    // Beside any deployment, they override what the url says (SPEC §2).
    if (auto v = read_string(o.get("username"), o.path("username"), c)) out.username = *v;
    if (auto v = read_string(o.get("password"), o.path("password"), c)) out.password = *v;
    if (auto v =
            read_int(o.get("connections_per_thread"), o.path("connections_per_thread"), c, 1, 64)) {
        if (cluster_j && *v != 1)
            c.fail(o.path("connections_per_thread"),
                   "must be 1 with \"cluster\": each event loop keeps one connection per master");
        else
            out.connections_per_thread = static_cast<int>(*v);
    }
    if (auto v = read_millis(o.get("command_timeout"), o.path("command_timeout"), c))
        out.command_timeout = *v;
    if (auto v = read_string(o.get("key_prefix"), o.path("key_prefix"), c, true)) {
        if (cluster_j && v->find_first_of("{}") != std::string::npos)
            c.fail(o.path("key_prefix"),
                   "must not hold '{' or '}' with \"cluster\": the braces of the keys are the "
                   "hash tags that spread the counters over the masters");
        else
            out.key_prefix = *v;
    }
    if (auto v = read_enum<redis_config::clock_source>(
            o.get("clock"), o.path("clock"), c,
            {{"redis", redis_config::clock_source::redis},
             {"gateway", redis_config::clock_source::gateway}}))
        out.clock = *v;
    if (auto v =
            read_int(o.get("over_limit_cache"), o.path("over_limit_cache"), c, 0, 10'000'000)) {
        if (cluster_j && *v != 0)
            c.fail(o.path("over_limit_cache"),
                   "must be 0 with \"cluster\": a refund can give back quota that a cached "
                   "refusal would still hold, so the cache is off there");
        else
            out.over_limit_cache = static_cast<std::size_t>(*v);
    }
    o.finish();
}

std::optional<cidr> parse_cidr(const std::string& text) {
    cidr out;
    out.text = text;
    auto slash = text.find('/');
    std::string addr = text.substr(0, slash);
    if (!is_ip_literal(addr, &out.bytes)) return std::nullopt;
    int max = static_cast<int>(out.bytes.size() * 8);
    out.prefix = max;
    if (slash != std::string::npos) {
        auto p = text.substr(slash + 1);
        if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), ::isdigit))
            return std::nullopt;
        out.prefix = std::stoi(p);
        if (out.prefix > max) return std::nullopt;
    }
    return out;
}

// A file path from the config: relative paths are relative to the config file's folder; the
// file must be readable. Returns the absolute path, or nullopt with an error.
std::optional<std::string> read_file_path(const json* j, const std::string& path, checker& c,
                                          std::string* contents = nullptr) {
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

void read_jwt(const json& j, const std::string& path, checker& c, jwt_config& out) {
    object_reader o(j, path, c);
    if (auto h = read_string(o.get("header"), o.path("header"), c)) {
        if (!is_token(*h))
            c.fail(o.path("header"), "\"" + *h + "\" is not a valid header name");
        else
            out.header = *h;
    }
    if (auto v = read_string(o.get("claim"), o.path("claim"), c)) out.claim = *v;
    auto algs_path = o.path("algorithms");
    bool wants_hmac = false, wants_keys = false;
    if (auto* a = o.get("algorithms", true)) {
        if (!a->is_array() || a->empty()) {
            c.fail(algs_path, "expected a non-empty array such as [\"RS256\", \"ES256\"]");
        } else {
            static const std::set<std::string> known{"HS256", "HS384", "HS512", "RS256", "RS384",
                                                     "RS512", "ES256", "ES384", "ES512"};
            for (std::size_t i = 0; i < a->size(); ++i) {
                auto v = read_string(&(*a)[i], element(algs_path, i), c);
                if (!v) continue;
                if (!known.count(*v)) {
                    c.fail(element(algs_path, i), "unsupported algorithm \"" + *v +
                                                      "\" (HS256/384/512, RS256/384/512, "
                                                      "ES256/384/512; never none)");
                    continue;
                }
                (v->starts_with("HS") ? wants_hmac : wants_keys) = true;
                out.algorithms.push_back(*v);
            }
        }
    }
    auto keys_path = o.path("public_keys");
    if (auto* k = o.get("public_keys")) {
        if (!k->is_array()) {
            c.fail(keys_path, "expected an array of PEM file paths");
        } else {
            for (std::size_t i = 0; i < k->size(); ++i) {
                std::string pem;
                if (auto p = read_file_path(&(*k)[i], element(keys_path, i), c, &pem)) {
                    if (pem.find("-----BEGIN PUBLIC KEY-----") == std::string::npos)
                        c.fail(element(keys_path, i), "\"" + *p + "\" is not a PEM public key");
                    out.public_key_files.push_back(*p);
                    out.public_key_pems.push_back(std::move(pem));
                }
            }
        }
    }
    if (auto v = read_string(o.get("hmac_secret_env"), o.path("hmac_secret_env"), c)) {
        out.hmac_secret_env = *v;
        const char* secret = std::getenv(v->c_str());
        if (!secret || !*secret)
            c.fail(o.path("hmac_secret_env"), "environment variable " + *v + " is not set");
        else
            out.hmac_secret = secret;
    }
    if (wants_hmac && out.hmac_secret_env.empty())
        c.fail(o.path("hmac_secret_env"), "required by the HS algorithms listed");
    if (wants_keys && out.public_key_pems.empty() && !o.get("public_keys"))
        c.fail(keys_path, "required by the RS/ES algorithms listed");
    if (auto v = read_string(o.get("issuer"), o.path("issuer"), c)) out.issuer = *v;
    if (auto v = read_string(o.get("audience"), o.path("audience"), c)) out.audience = *v;
    if (auto v = read_duration(o.get("leeway"), o.path("leeway"), c)) out.leeway = *v;
    o.finish();
}

void read_tls_server(const json& j, const std::string& path, checker& c, tls_server_config& out) {
    object_reader o(j, path, c);
    if (auto p = read_file_path(o.get("cert", true), o.path("cert"), c)) out.cert_file = *p;
    if (auto p = read_file_path(o.get("key", true), o.path("key"), c)) out.key_file = *p;
    o.finish();
}

void read_tls_client(const json& j, const std::string& path, checker& c, tls_client_config& out) {
    object_reader o(j, path, c);
    if (auto p = read_file_path(o.get("ca"), o.path("ca"), c)) out.ca_file = *p;
    if (auto v = read_string(o.get("server_name"), o.path("server_name"), c)) {
        if (!is_hostname(*v) && !is_ip_literal(*v))
            c.fail(o.path("server_name"), "\"" + *v + "\" is not a host name");
        else
            out.server_name = *v;
    }
    if (auto v = read_bool(o.get("verify"), o.path("verify"), c)) out.verify = *v;
    o.finish();
}

void read_identity(const json& j, const std::string& path, checker& c, identity_config& out) {
    object_reader o(j, path, c);
    if (auto* u = o.get("user")) {
        object_reader ou(*u, o.path("user"), c);
        auto* jwt = ou.get("jwt");
        if (auto h = read_string(ou.get("header", !jwt), ou.path("header"), c)) {
            if (jwt)
                c.fail(ou.path("header"), "give either \"header\" or \"jwt\", not both");
            else if (!is_token(*h))
                c.fail(ou.path("header"), "\"" + *h + "\" is not a valid header name");
            else
                out.user_header = *h;
        }
        if (jwt) {
            jwt_config jc;
            read_jwt(*jwt, ou.path("jwt"), c, jc);
            out.jwt = std::move(jc);
        }
        ou.finish();
    }
    if (auto* ip = o.get("client_ip")) {
        object_reader oi(*ip, o.path("client_ip"), c);
        auto tp_path = oi.path("trusted_proxies");
        if (auto* tp = oi.get("trusted_proxies")) {
            if (!tp->is_array()) {
                c.fail(tp_path,
                       std::string("expected an array of CIDR blocks, got ") + type_name(*tp));
            } else {
                for (std::size_t i = 0; i < tp->size(); ++i) {
                    auto s = read_string(&(*tp)[i], element(tp_path, i), c);
                    if (!s) continue;
                    if (auto block = parse_cidr(*s))
                        out.trusted_proxies.push_back(*block);
                    else
                        c.fail(element(tp_path, i),
                               "\"" + *s + "\" is not a CIDR block such as 10.0.0.0/8");
                }
            }
        }
        if (auto h = read_string(oi.get("header"), oi.path("header"), c)) {
            if (!is_token(*h))
                c.fail(oi.path("header"), "\"" + *h + "\" is not a valid header name");
            else
                out.client_ip_header = *h;
        }
        oi.finish();
    }
    o.finish();
}

void read_upstream(const json& j, const std::string& path, checker& c, upstream_config& out) {
    object_reader o(j, path, c);
    auto targets_path = o.path("targets");
    if (auto* t = o.get("targets", true)) {
        if (!t->is_array() || t->empty()) {
            c.fail(targets_path, "expected a non-empty array of \"host:port\"");
        } else {
            for (std::size_t i = 0; i < t->size(); ++i)
                if (auto hp = read_host_port(&(*t)[i], element(targets_path, i), c, false))
                    out.targets.push_back(*hp);
        }
    }
    if (auto v = read_millis(o.get("connect_timeout"), o.path("connect_timeout"), c))
        out.connect_timeout = *v;
    if (auto v = read_millis(o.get("response_timeout"), o.path("response_timeout"), c))
        out.response_timeout = *v;
    if (auto v =
            read_int(o.get("max_idle_per_target"), o.path("max_idle_per_target"), c, 0, 100000))
        out.max_idle_per_target = static_cast<std::size_t>(*v);
    if (auto* t = o.get("tls")) {
        tls_client_config tc;
        read_tls_client(*t, o.path("tls"), c, tc);
        out.tls = tc;
    }
    o.finish();
}

// Which rule fields each algorithm takes (SPEC §2 table).
std::set<std::string> rule_fields(algorithm a) {
    switch (a) {
        case algorithm::fixed_window:
        case algorithm::sliding_window_log:
            return {"limit", "window"};
        case algorithm::sliding_window_counter:
            return {"limit", "window", "buckets"};
        case algorithm::leaky_bucket:
            return {"rate", "period", "capacity"};
        case algorithm::token_bucket:
        case algorithm::gcra:
            return {"rate", "period", "burst"};
        case algorithm::smooth_bursty:
            return {"rate", "max_burst_seconds", "idle_ttl"};
        case algorithm::smooth_warming_up:
            return {"rate", "warmup_period", "cold_factor"};
    }
    return {};
}

void read_rule(const json& j, const std::string& path, checker& c, algorithm a, rule_config& r) {
    object_reader o(j, path, c);
    auto fields = rule_fields(a);
    // SPEC §2: a rule field without a default in the table is required, for every algorithm.
    static const std::set<std::string> with_default{"buckets", "max_burst_seconds", "idle_ttl",
                                                    "cold_factor"};
    auto want = [&](const char* key) -> const json* {
        if (!fields.count(key)) return nullptr;
        return o.get(key, !with_default.count(key));
    };
    if (auto v = read_int(want("limit"), o.path("limit"), c, 1, 1'000'000'000'000)) r.limit = *v;
    if (auto v = read_duration(want("window"), o.path("window"), c)) r.window = *v;
    if (auto v = read_int(want("buckets"), o.path("buckets"), c, 1, 3600))
        r.buckets = static_cast<int>(*v);
    if (auto v = read_positive(want("rate"), o.path("rate"), c)) r.rate = *v;
    if (auto v = read_duration(want("period"), o.path("period"), c)) r.period = *v;
    if (auto v = read_positive(want("burst"), o.path("burst"), c, 1, true)) r.burst = *v;
    if (auto v = read_positive(want("capacity"), o.path("capacity"), c)) r.capacity = *v;
    if (auto v = read_positive(want("max_burst_seconds"), o.path("max_burst_seconds"), c))
        r.max_burst_seconds = *v;
    if (auto v = read_duration(want("idle_ttl"), o.path("idle_ttl"), c)) r.idle_ttl = *v;
    if (auto v = read_duration(want("warmup_period"), o.path("warmup_period"), c))
        r.warmup_period = *v;
    if (auto v = read_positive(want("cold_factor"), o.path("cold_factor"), c, 1, true))
        r.cold_factor = *v;
    if (a == algorithm::sliding_window_counter && r.window.count() > 0 &&
        r.window.count() % r.buckets != 0)
        c.fail(o.path("buckets"), "window must divide into " + std::to_string(r.buckets) +
                                      " sub-windows of whole microseconds");
    o.finish();
}

void read_limiter(const json& j, const std::string& path, checker& c, limiter_config& l) {
    object_reader o(j, path, c);
    if (auto s = read_string(o.get("scope", true), o.path("scope"), c)) {
        if (*s == "global")
            l.scope = scope_kind::global;
        else if (*s == "route")
            l.scope = scope_kind::route;
        else if (*s == "user")
            l.scope = scope_kind::user;
        else if (*s == "ip")
            l.scope = scope_kind::ip;
        else if (s->rfind("header:", 0) == 0 && is_token(s->substr(7))) {
            l.scope = scope_kind::header;
            l.scope_header = s->substr(7);
        } else
            c.fail(o.path("scope"),
                   "unknown scope \"" + *s +
                       "\" (expected \"global\", \"route\", \"user\", \"ip\" or \"header:NAME\")");
    }
    auto algo = read_enum<algorithm>(o.get("algorithm", true), o.path("algorithm"), c,
                                     {{"fixed_window", algorithm::fixed_window},
                                      {"sliding_window_log", algorithm::sliding_window_log},
                                      {"sliding_window_counter", algorithm::sliding_window_counter},
                                      {"leaky_bucket", algorithm::leaky_bucket},
                                      {"token_bucket", algorithm::token_bucket},
                                      {"gcra", algorithm::gcra},
                                      {"smooth_bursty", algorithm::smooth_bursty},
                                      {"smooth_warming_up", algorithm::smooth_warming_up}});
    auto rules_path = o.path("rules");
    const json* rules = o.get("rules", true);
    if (algo) {
        l.algo = *algo;
        if (rules) {
            if (!rules->is_array() || rules->empty()) {
                c.fail(rules_path, "expected a non-empty array of rules");
            } else {
                for (std::size_t i = 0; i < rules->size(); ++i) {
                    rule_config r;
                    read_rule((*rules)[i], element(rules_path, i), c, *algo, r);
                    l.rules.push_back(r);
                }
            }
        }
    }
    if (auto m = read_enum<bool>(o.get("mode"), o.path("mode"), c,
                                 {{"enforce", false}, {"shadow", true}}))
        l.shadow = *m;
    if (auto d = read_duration(o.get("delay"), o.path("delay"), c)) l.delay = *d;
    if (auto m = read_enum<missing_key_policy>(o.get("on_missing_key"), o.path("on_missing_key"), c,
                                               {{"skip", missing_key_policy::skip},
                                                {"deny", missing_key_policy::deny},
                                                {"anonymous", missing_key_policy::anonymous}}))
        l.on_missing_key = *m;
    if (auto* p = o.get("ipv6_prefix")) {
        if (l.scope != scope_kind::ip)
            c.fail(o.path("ipv6_prefix"), "only applies to scope \"ip\"");
        else if (auto v = read_int(p, o.path("ipv6_prefix"), c, 1, 128))
            l.ipv6_prefix = static_cast<int>(*v);
    }
    if (auto* p = o.get("ipv4_prefix")) {
        if (l.scope != scope_kind::ip)
            c.fail(o.path("ipv4_prefix"), "only applies to scope \"ip\"");
        else if (auto v = read_int(p, o.path("ipv4_prefix"), c, 0, 32))
            l.ipv4_prefix = static_cast<int>(*v);
    }
    if (auto* p = o.get("per_route")) {
        if (l.scope != scope_kind::user && l.scope != scope_kind::ip)
            c.fail(o.path("per_route"), "only applies to scopes \"user\" and \"ip\"");
        else if (auto v = read_bool(p, o.path("per_route"), c))
            l.per_route = *v;
    }
    if (auto v = read_bool(o.get("cache"), o.path("cache"), c)) l.cache = *v;
    o.finish();
}

// The most one request may cost on an enforced layer's rule, or nullopt when any cost can pass
// (smooth_*: Guava admits one acquire of any size and makes the next request pay for it).
std::optional<std::pair<double, const char*>> rule_capacity(algorithm a, const rule_config& r) {
    switch (a) {
        case algorithm::fixed_window:
        case algorithm::sliding_window_log:
        case algorithm::sliding_window_counter:
            return std::pair{static_cast<double>(r.limit), "limit"};
        case algorithm::leaky_bucket:
            return std::pair{r.capacity, "capacity"};
        case algorithm::token_bucket:
        case algorithm::gcra:
            return std::pair{r.burst, "burst"};
        case algorithm::smooth_bursty:
        case algorithm::smooth_warming_up:
            return std::nullopt;
    }
    return std::nullopt;
}

// A route whose cost exceeds an enforced layer's capacity could never pass (with or without
// `delay`). Shadow layers never reject and are not checked.
void check_cost(const route_config& r, const std::string& path, checker& c, const config& cfg) {
    for (const auto& name : r.limiters) {
        const auto& l = cfg.limiters.at(name);
        if (l.shadow) continue;
        for (std::size_t i = 0; i < l.rules.size(); ++i) {
            auto cap = rule_capacity(l.algo, l.rules[i]);
            // A rule whose field failed to load has already been reported.
            if (!cap || cap->first <= 0 || static_cast<double>(r.cost) <= cap->first) continue;
            std::ostringstream o;
            o << "cost " << r.cost << " exceeds limiter \"" << name << "\" (rules[" << i << "]."
              << cap->second << " = " << cap->first << "): no request could ever pass";
            c.fail(path, o.str());
            break;
        }
    }
}

void read_route(const json& j, const std::string& path, checker& c, const config& cfg,
                route_config& r) {
    object_reader o(j, path, c);
    if (auto v = read_string(o.get("name", true), o.path("name"), c)) r.name = *v;
    if (auto* m = o.get("match", true)) {
        object_reader om(*m, o.path("match"), c);
        auto path_field = [&](const char* key) -> std::optional<std::string> {
            auto v = read_string(om.get(key), om.path(key), c);
            if (v && v->front() != '/') {
                c.fail(om.path(key), "must start with \"/\"");
                return std::nullopt;
            }
            return v;
        };
        r.match.path = path_field("path");
        r.match.path_prefix = path_field("path_prefix");
        if (om.valid() && !m->contains("path") && !m->contains("path_prefix"))
            c.fail(o.path("match"), "needs \"path\" or \"path_prefix\"");
        auto methods_path = om.path("methods");
        if (auto* ms = om.get("methods")) {
            if (!ms->is_array()) {
                c.fail(methods_path,
                       std::string("expected an array of methods, got ") + type_name(*ms));
            } else {
                for (std::size_t i = 0; i < ms->size(); ++i) {
                    auto s = read_string(&(*ms)[i], element(methods_path, i), c);
                    if (s && is_token(*s))
                        r.match.methods.push_back(*s);
                    else if (s)
                        c.fail(element(methods_path, i), "\"" + *s + "\" is not an HTTP method");
                }
            }
        }
        if (auto h = read_string(om.get("host"), om.path("host"), c)) {
            std::string lower = *h;
            std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
            r.match.host = lower;
        }
        om.finish();
    }
    if (auto v = read_string(o.get("upstream", true), o.path("upstream"), c)) {
        if (!cfg.upstreams.count(*v) && !cfg.upstreams.empty())
            c.fail(o.path("upstream"), "no upstream named \"" + *v + "\"");
        r.upstream = *v;
    }
    if (auto v = read_string(o.get("strip_prefix"), o.path("strip_prefix"), c)) {
        if (v->front() != '/')
            c.fail(o.path("strip_prefix"), "must start with \"/\"");
        else
            r.strip_prefix = *v;
    }
    auto limiters_path = o.path("limiters");
    if (auto* ls = o.get("limiters")) {
        if (!ls->is_array()) {
            c.fail(limiters_path,
                   std::string("expected an array of limiter names, got ") + type_name(*ls));
        } else {
            for (std::size_t i = 0; i < ls->size(); ++i) {
                auto s = read_string(&(*ls)[i], element(limiters_path, i), c);
                if (!s) continue;
                if (!cfg.limiters.count(*s))
                    c.fail(element(limiters_path, i), "no limiter named \"" + *s + "\"");
                else if (std::find(r.limiters.begin(), r.limiters.end(), *s) != r.limiters.end())
                    c.fail(element(limiters_path, i), "limiter \"" + *s + "\" is listed twice");
                else
                    r.limiters.push_back(*s);
            }
        }
    }
    if (auto v = read_int(o.get("cost"), o.path("cost"), c, 1, 1'000'000'000)) r.cost = *v;
    check_cost(r, o.path("cost"), c, cfg);
    if (auto* ol = o.get("on_limit")) {
        object_reader oo(*ol, o.path("on_limit"), c);
        if (auto v = read_int(oo.get("status"), oo.path("status"), c, 400, 599))
            r.on_limit_status = static_cast<int>(*v);
        if (auto v = read_string(oo.get("message"), oo.path("message"), c, true))
            r.on_limit_message = *v;
        oo.finish();
    }
    if (auto v = read_enum<redis_error_policy>(o.get("on_redis_error"), o.path("on_redis_error"), c,
                                               {{"allow", redis_error_policy::allow},
                                                {"deny", redis_error_policy::deny},
                                                {"local", redis_error_policy::local}}))
        r.on_redis_error = *v;
    if (auto v = read_enum<header_style>(o.get("headers"), o.path("headers"), c,
                                         {{"ietf", header_style::ietf},
                                          {"legacy", header_style::legacy},
                                          {"both", header_style::both},
                                          {"none", header_style::none}}))
        r.headers = *v;
    if (auto v = read_bool(o.get("websocket"), o.path("websocket"), c)) r.websocket = *v;
    o.finish();
}

void read_log(const json& j, const std::string& path, checker& c, log_config& out) {
    object_reader o(j, path, c);
    if (auto v = read_enum<std::string>(o.get("level"), o.path("level"), c,
                                        {{"trace", "trace"},
                                         {"debug", "debug"},
                                         {"info", "info"},
                                         {"warn", "warn"},
                                         {"error", "error"},
                                         {"off", "off"}}))
        out.level = *v;
    if (auto v = read_bool(o.get("access_log"), o.path("access_log"), c)) out.access_log = *v;
    if (auto v = read_enum<log_config::format>(
            o.get("format"), o.path("format"), c,
            {{"text", log_config::format::text}, {"json", log_config::format::json}}))
        out.access_format = *v;
    o.finish();
}

std::string parse_error_position(const std::string& text, std::size_t byte) {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < text.size() && i + 1 < byte; ++i) {
        if (text[i] == '\n')
            ++line, col = 1;
        else
            ++col;
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

}  // namespace

std::shared_ptr<const config> parse_config(const std::string& text, const std::string& file) {
    json doc;
    try {
        doc = json::parse(text, nullptr, true, /*ignore_comments=*/true);
    } catch (const json::parse_error& e) {
        std::string what = e.what();
        auto pos = what.find("syntax error");
        throw config_errors(file,
                            {{"$", "invalid JSON at " + parse_error_position(text, e.byte) + ": " +
                                       (pos == std::string::npos ? what : what.substr(pos))}});
    } catch (const json::out_of_range& e) {
        // nlohmann::json reports a number too large for a double ("1e999") this way, not as a
        // parse_error (found by tests/fuzz/fuzz_config).
        std::string what = e.what();
        auto pos = what.find("] ");
        throw config_errors(
            file,
            {{"$", "invalid JSON: " + (pos == std::string::npos ? what : what.substr(pos + 2))}});
    }
    checker c;
    c.base_dir = std::filesystem::path(file).parent_path().string();
    auto cfg = std::make_shared<config>();
    cfg->source = file;
    object_reader root(doc, "", c);
    if (auto v = read_host_port(root.get("listen", true), "listen", c, true)) cfg->listen = *v;
    if (auto v = read_int(root.get("threads"), "threads", c, 0, 1024))
        cfg->threads = static_cast<int>(*v);
    if (auto* a = root.get("admin")) {
        object_reader oa(*a, "admin", c);
        if (auto v = read_host_port(oa.get("listen"), "admin.listen", c, true))
            cfg->admin_listen = *v;
        oa.finish();
    }
    if (auto* l = root.get("limits")) read_limits(*l, "limits", c, cfg->limits);
    if (auto* t = root.get("tls")) {
        tls_server_config tc;
        read_tls_server(*t, "tls", c, tc);
        cfg->tls = tc;
    }
    if (auto* r = root.get("redis")) {
        redis_config rc;
        read_redis(*r, "redis", c, rc);
        cfg->redis = rc;
    }
    if (auto* i = root.get("identity")) read_identity(*i, "identity", c, cfg->identity);
    if (auto* u = root.get("upstreams", true)) {
        if (!u->is_object() || u->empty()) {
            c.fail("upstreams", "expected a non-empty object of upstreams");
        } else {
            for (auto it = u->begin(); it != u->end(); ++it) {
                upstream_config uc;
                uc.name = it.key();
                read_upstream(it.value(), "upstreams." + it.key(), c, uc);
                cfg->upstreams.emplace(it.key(), std::move(uc));
            }
        }
    }
    if (auto* l = root.get("limiters")) {
        if (!l->is_object()) {
            c.fail("limiters", std::string("expected an object of limiters, got ") + type_name(*l));
        } else {
            for (auto it = l->begin(); it != l->end(); ++it) {
                limiter_config lc;
                lc.name = it.key();
                read_limiter(it.value(), "limiters." + it.key(), c, lc);
                cfg->limiters.emplace(it.key(), std::move(lc));
            }
        }
    }
    if (auto* rs = root.get("routes", true)) {
        if (!rs->is_array() || rs->empty()) {
            c.fail("routes", "expected a non-empty array of routes");
        } else {
            std::set<std::string> names;
            for (std::size_t i = 0; i < rs->size(); ++i) {
                route_config rc;
                auto path = element("routes", i);
                read_route((*rs)[i], path, c, *cfg, rc);
                if (!rc.name.empty() && !names.insert(rc.name).second)
                    c.fail(path + ".name", "duplicate route name \"" + rc.name + "\"");
                cfg->routes.push_back(std::move(rc));
            }
        }
    }
    if (auto* l = root.get("log")) read_log(*l, "log", c, cfg->log);
    root.finish();
    if (!c.errors.empty()) throw config_errors(file, std::move(c.errors));
    cfg->json_masked = mask_secrets(doc).dump(2);
    return cfg;
}

std::shared_ptr<const config> load_config(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw config_errors(file, {{"$", "cannot open file"}});
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_config(ss.str(), file);
}

}  // namespace rategate::config
