// The validated, immutable configuration of a rategate process (SPEC §2).
// Loaded once by load_config(); everything downstream reads these plain structs.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rategate::config {

using millis = std::chrono::milliseconds;
using micros = std::chrono::microseconds;

/// A "host:port" pair as written in the config. `host` keeps IPv6 without brackets.
struct host_port {
    std::string host;
    std::uint16_t port = 0;
    std::string to_string() const;
};

/// SPEC §2 `limits`: per-connection protection of the listener.
struct limits_config {
    std::size_t max_header_bytes = 16384;                ///< whole header block, bytes
    std::uint64_t max_body_bytes = 10ull * 1024 * 1024;  ///< request body, bytes
    millis header_timeout{10'000};                       ///< deadline for one header block
    millis idle_timeout{60'000};                         ///< keep-alive wait between requests
    std::size_t max_connections = 10000;                 ///< open client connections, whole process
};

/// SPEC §2 `redis`: where the shared limiter state lives.
/// SPEC §2 "Redis deployments": the master is asked of these sentinels.
struct sentinel_config {
    std::string master;            ///< the name the sentinels monitor
    std::vector<host_port> nodes;  ///< asked in order, the last one that answered first
    std::string username;          ///< ACL user of the sentinels (empty: none)
    std::string password;          ///< of the sentinels (empty: no AUTH)
};

/// SPEC §2 "Redis deployments": the slot map is learned from any of these seed nodes.
struct cluster_config {
    std::vector<host_port> nodes;  ///< seeds, asked in order until one answers
};

struct redis_config {
    std::string url = "redis://127.0.0.1:6379/0";  ///< empty with sentinel or cluster
    std::string host = "127.0.0.1";
    std::uint16_t port = 6379;
    std::optional<sentinel_config> sentinel;  ///< set: host/port come from the sentinels
    std::optional<cluster_config> cluster;    ///< set: Redis Cluster, one connection per master
    std::string username;  ///< ACL user of the data nodes (empty: the default user)
    std::string password;  ///< empty: no AUTH
    int db = 0;
    int connections_per_thread = 1;
    millis command_timeout{50};
    std::string key_prefix = "rategate:";
    enum class clock_source { redis, gateway } clock = clock_source::redis;
    /// Entries of the exact over-limit cache per event loop (0 = off); see
    /// limiters/local/over_limit_cache.hpp. Off with `cluster`: a refund can give back quota
    /// that a cached refusal would still hold.
    std::size_t over_limit_cache = 10000;
};

/// A CIDR block such as 10.0.0.0/8 or ::1/128; `bytes` is 4 or 16 bytes long.
struct cidr {
    std::string text;
    std::vector<std::uint8_t> bytes;
    int prefix = 0;
};

/// SPEC §2 `identity.user.jwt`: the user id from a verified JSON Web Token (RFC 7519).
struct jwt_config {
    std::string header = "Authorization";       ///< carries `Bearer <token>`
    std::string claim = "sub";                  ///< the claim that is the user id
    std::vector<std::string> algorithms;        ///< allow-list (HS256…ES512)
    std::vector<std::string> public_key_files;  ///< PEM files, absolute paths
    std::vector<std::string> public_key_pems;   ///< their contents, read at load (and reload)
    std::string hmac_secret_env;                ///< environment variable holding the HS secret
    std::string hmac_secret;                    ///< its value, read at load (never shown)
    std::optional<std::string> issuer, audience;
    micros leeway{0};
};

/// SPEC §2 `tls`: HTTPS on `listen`. Paths are absolute (relative ones resolved against the
/// config file's folder).
struct tls_server_config {
    std::string cert_file, key_file;
};

/// SPEC §2 `http2`: HTTP/2 (RFC 9113) on `listen`.
struct http2_config {
    bool enabled = true;                           ///< ALPN "h2" offered under TLS
    bool h2c = false;                              ///< cleartext HTTP/2 with prior knowledge
    std::uint32_t max_concurrent_streams = 100;    ///< SETTINGS_MAX_CONCURRENT_STREAMS
    std::uint32_t initial_window_size = 1u << 20;  ///< per stream and connection, bytes
    std::uint32_t max_resets_per_second = 100;     ///< client RST_STREAMs before GOAWAY
};

/// SPEC §2 upstream `protocol`: what the gateway speaks to the targets.
enum class upstream_protocol { http1, h2, h2c };

/// SPEC §2 upstream `tls`: HTTPS to the targets, verified unless `verify` is false.
struct tls_client_config {
    std::optional<std::string> ca_file;      ///< absolute path; none: the system store
    std::optional<std::string> server_name;  ///< SNI and the checked name; none: the host
    bool verify = true;
};

struct identity_config {
    std::string user_header = "X-User-Id";
    std::optional<jwt_config> jwt;  ///< set: the user comes from a verified JWT, not a header
    std::vector<cidr> trusted_proxies;
    /// `identity.client_ip.header`: "X-Forwarded-For", "Forwarded" (RFC 7239) or the name of a
    /// one-address header such as "X-Real-IP"; kinds match case-insensitively.
    std::string client_ip_header = "X-Forwarded-For";
    /// `identity.client_ip.trusted_hops`: the peer and the N − 1 right-most forwarding entries
    /// are trusted whatever their addresses (Envoy's `xff_num_trusted_hops`); 0: not set.
    unsigned trusted_hops = 0;
};

/// SPEC §2 `upstreams.NAME`: a pool of interchangeable targets.
struct upstream_config {
    std::string name;
    std::vector<host_port> targets;
    millis connect_timeout{1'000};
    millis response_timeout{30'000};
    std::size_t max_idle_per_target = 64;
    std::optional<tls_client_config> tls;
    upstream_protocol protocol = upstream_protocol::http1;
};

enum class algorithm {
    fixed_window,
    sliding_window_log,
    sliding_window_counter,
    leaky_bucket,
    token_bucket,
    gcra,
    smooth_bursty,
    smooth_warming_up
};
/// The algorithm's name as the config writes it ("token_bucket").
const char* to_string(algorithm a);

enum class scope_kind { global, route, user, ip, header };

/// One rule of a limiter. Which fields are meaningful depends on the algorithm (SPEC §2
/// table); the loader rejects fields an algorithm does not use. The fields each algorithm
/// takes, their bounds and their defaults are rows of limiters/algorithms/table.hpp, which the
/// loader reads (config/limiters.cpp); a field an algorithm does not take stays 0.
struct rule_config {
    std::int64_t limit = 0;        ///< permits per window (window algorithms)
    micros window{0};              ///< window width
    int buckets = 0;               ///< sliding_window_counter sub-windows
    double rate = 0;               ///< permits per `period` (per second for smooth_*)
    micros period{0};              ///< refill period
    double burst = 0;              ///< token_bucket / gcra burst, permits
    double capacity = 0;           ///< leaky_bucket capacity, permits
    double max_burst_seconds = 0;  ///< smooth_bursty: stored permits at most rate x this
    micros idle_ttl{0};            ///< smooth_bursty: a key idle this long is new again
    micros warmup_period{0};       ///< smooth_warming_up: from cold to the stable rate
    double cold_factor = 0;        ///< smooth_warming_up: cold interval / stable interval
};

enum class missing_key_policy { skip, deny, anonymous };

struct limiter_config {
    std::string name;
    scope_kind scope = scope_kind::global;
    std::string scope_header;  ///< for scope "header:NAME"
    algorithm algo = algorithm::token_bucket;
    std::vector<rule_config> rules;
    bool shadow = false;
    std::optional<micros> delay;
    missing_key_policy on_missing_key = missing_key_policy::skip;
    int ipv6_prefix = 128;  ///< ip scope: IPv6 clients grouped by this many leading bits
    int ipv4_prefix = 32;   ///< ip scope: IPv4 clients grouped by this many leading bits
    bool per_route = false;
    bool cache = true;  ///< its rejections may be answered from the over-limit cache
    /// `"sync": {"lease": N}`: permits each event loop takes from Redis at once (0: every
    /// decision exact in Redis). token_bucket and fixed_window of scope global or route only.
    int lease = 0;
};

enum class redis_error_policy { allow, deny, local };
enum class header_style { ietf, legacy, both, none };

struct route_match {
    std::optional<std::string> path;         ///< exact path
    std::optional<std::string> path_prefix;  ///< plain string prefix of the path
    std::vector<std::string> methods;        ///< empty: any method
    std::optional<std::string> host;         ///< Host header without port, case-insensitive
};

struct route_config {
    std::string name;
    route_match match;
    std::string upstream;
    std::string strip_prefix;
    std::vector<std::string> limiters;
    std::int64_t cost = 1;
    int on_limit_status = 429;
    std::string on_limit_message = "Too many requests, please retry later";
    redis_error_policy on_redis_error = redis_error_policy::allow;
    header_style headers = header_style::ietf;
    bool websocket = false;  ///< Upgrade: websocket is tunnelled (SPEC §3)
};

struct log_config {
    std::string level = "info";
    bool access_log = true;
    enum class format { text, json } access_format = format::text;
};

/// The whole file, validated. Shared read-only between threads by shared_ptr.
struct config {
    std::string source;  ///< file name it came from
    host_port listen{"0.0.0.0", 8080};
    int threads = 0;  ///< 0 = one per core
    std::optional<host_port> admin_listen;
    std::optional<tls_server_config> tls;
    http2_config http2;
    limits_config limits;
    std::optional<redis_config> redis;
    identity_config identity;
    std::map<std::string, upstream_config> upstreams;
    std::map<std::string, limiter_config> limiters;
    std::vector<route_config> routes;
    log_config log;
    std::string
        json_masked;  ///< the file as parsed (comments dropped), passwords masked: for /config
};

/// One problem found in a config file, located by its JSON path (e.g. `routes[0].match`).
struct config_error {
    std::string path;
    std::string message;
};

/// Thrown by load_config with every problem of the file, not just the first.
class config_errors : public std::runtime_error {
  public:
    config_errors(std::string file, std::vector<config_error> errors);
    const std::string& file() const { return file_; }
    const std::vector<config_error>& errors() const { return errors_; }

  private:
    std::string file_;
    std::vector<config_error> errors_;
};

/// Parses and validates JSON text (with // comments). `file` names it in errors.
/// Throws config_errors listing all problems; lines render as `FILE: json.path: message`.
std::shared_ptr<const config> parse_config(const std::string& text, const std::string& file);

/// The most permits one request may cost: a route's `cost`, or a replayed request's.
inline constexpr std::int64_t max_cost = 1'000'000'000;

/// Where a request of `cost` permits makes a rule of limiter `l` span longer than the twins can
/// compute (limiters::max_span_us, 1e15 µs): "rules[I]: why" for the first such rule, else
/// nullopt. The config checks each route's cost with it, replay each trace line's own cost.
std::optional<std::string> cost_span_problem(const limiter_config& l, double cost);

/// Reads `file` and calls parse_config. An unreadable file is a config_errors with path `$`.
std::shared_ptr<const config> load_config(const std::string& file);

}  // namespace rategate::config
