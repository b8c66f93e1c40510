// Loading of the JSON config (SPEC §2): parse, then read every section (sections.hpp). Every
// problem is collected with its JSON path so `rategate check` can report all of them at once.
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "config/config.hpp"
#include "config/mask.hpp"
#include "config/sections.hpp"

namespace rategate::config {

using namespace detail;

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

// nlohmann::json keeps the last of two equal keys of an object without a word, so a second
// limiter of the same name replaced the first and a route with "limiters" twice lost the first
// list. The parser's callback sees every key: this names each repeated one by its JSON path.
class duplicate_keys {
  public:
    std::vector<config_error> errors;

    bool operator()(int, json::parse_event_t event, json& parsed) {
        using ev = json::parse_event_t;
        switch (event) {
            case ev::object_start:
            case ev::array_start:
                frames_.push_back({event == ev::array_start, 0, next_path(), {}, {}});
                break;
            case ev::object_end:
            case ev::array_end:
                if (!frames_.empty()) frames_.pop_back();
                break;
            case ev::key: {
                auto& f = frames_.back();
                f.key = parsed.get<std::string>();
                if (!f.keys.insert(f.key).second)
                    errors.push_back({child(f.path, f.key), "duplicate key \"" + f.key +
                                                                "\" (only the last one would "
                                                                "count)"});
                break;
            }
            case ev::value:
                if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
                break;
        }
        return true;
    }

  private:
    struct frame {
        bool array;
        std::size_t index;
        std::string path;
        std::set<std::string> keys;
        std::string key;
    };
    // The path of the value that starts now.
    std::string next_path() {
        if (frames_.empty()) return "";
        auto& f = frames_.back();
        return f.array ? element(f.path, f.index++) : child(f.path, f.key);
    }
    std::vector<frame> frames_;
};

// Two listen addresses on one port that one process cannot both bind: the same address, "::"
// (dual-stack on Linux) beside any address, or "0.0.0.0" beside an IPv4 address.
bool overlaps(const host_port& a, const host_port& b) {
    auto covers = [](const host_port& w, const host_port& x) {
        return w.host == "::" || (w.host == "0.0.0.0" && x.host.find(':') == std::string::npos);
    };
    return a.port == b.port && (a.host == b.host || covers(a, b) || covers(b, a));
}

}  // namespace

std::shared_ptr<const config> parse_config(const std::string& text, const std::string& file) {
    json doc;
    duplicate_keys duplicates;
    try {
        doc = json::parse(text, std::ref(duplicates), true, /*ignore_comments=*/true);
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
    c.errors = std::move(duplicates.errors);
    c.base_dir = std::filesystem::path(file).parent_path().string();
    auto cfg = std::make_shared<config>();
    cfg->source = file;
    object_reader root(doc, "", c);
    bool listen_ok = false;
    if (auto v = read_host_port(root.get("listen", true), "listen", c, true))
        cfg->listen = *v, listen_ok = true;
    if (auto v = read_int(root.get("threads"), "threads", c, 0, 1024))
        cfg->threads = static_cast<int>(*v);
    if (auto* a = root.get("admin")) {
        object_reader oa(*a, "admin", c);
        if (auto v = read_host_port(oa.get("listen"), "admin.listen", c, true)) {
            // `check` passed a pair that `serve` could never bind ("Address already in use").
            if (listen_ok && overlaps(*v, cfg->listen))
                c.fail("admin.listen", "\"" + v->to_string() + "\" takes the port of listen (\"" +
                                           cfg->listen.to_string() + "\"): both cannot bind");
            else
                cfg->admin_listen = *v;
        }
        oa.finish();
    }
    if (auto* l = root.get("limits")) read_limits(*l, "limits", c, cfg->limits);
    if (auto* t = root.get("tls")) {
        tls_server_config tc;
        read_tls_server(*t, "tls", c, tc);
        cfg->tls = tc;
    }
    if (auto* h = root.get("http2")) read_http2(*h, "http2", c, cfg->http2);
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
