// libFuzzer harness for the config loader: parse_config either returns a config or throws
// config_errors (its documented exception); any other exception or a crash is a finding. An
// accepted config must hold what the loader promises: a listen address, upstreams, routes,
// and a /config rendering with the Redis password masked.
#include <boost/url/parse.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <typeinfo>

#include "config/config.hpp"
#include "config/mask.hpp"

using namespace rategate::config;

namespace {

void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string text(reinterpret_cast<const char*>(data), size);
    std::shared_ptr<const config> cfg;
    try {
        cfg = parse_config(text, "fuzz.json");
    } catch (const config_errors& e) {
        require(!e.errors().empty(), "config_errors lists at least one problem");
        require(e.file() == "fuzz.json", "config_errors names the file");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "parse_config threw a %s, not config_errors: %s\n", typeid(e).name(),
                     e.what());
        std::abort();
    }
    require(cfg != nullptr, "a config or an exception");
    require(cfg->source == "fuzz.json", "source is the file name");
    require(!cfg->upstreams.empty(), "an accepted config has upstreams");
    require(!cfg->routes.empty(), "an accepted config has routes");
    auto shown = nlohmann::json::parse(cfg->json_masked, nullptr, false);
    require(shown.is_object(), "json_masked is a JSON object");
    if (cfg->redis && !cfg->redis->password.empty() && cfg->redis->password != masked_secret &&
        shown["redis"].contains("url")) {
        const auto& field = shown["redis"]["url"];
        require(field.is_string(), "the masked redis.url is a string");
        auto url = field.get<std::string>();
        auto parsed = boost::urls::parse_uri(url);
        require(parsed.has_value(), "the masked redis.url is still a URL");
        require(!parsed->has_password() || parsed->password() != cfg->redis->password,
                "the masked redis.url does not show the password");
    }
    return 0;
}
