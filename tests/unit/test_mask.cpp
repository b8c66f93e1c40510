#include <doctest/doctest.h>

#include "config/mask.hpp"

using nlohmann::json;
using rategate::config::mask_secrets;

TEST_CASE("secrets are masked wherever they stand, URLs included") {
    json doc = {
        {"redis",
         {{"url", "redis://:p%40ss@127.0.0.1:6379/0"},
          {"password", "plain"},
          {"sentinel", {{"nodes", {"a:1"}}, {"password", "s3"}}}}},
        {"identity", {{"user", {{"jwt", {{"hmac_secret_env", "JWT_SECRET"}}}}}}},
        {"other",
         {"redis://user:pw@h:1/0", "redis://user@h:1/0", "http://x.example/a@b",
          "weird://a:b@c d"}},
    };
    auto m = mask_secrets(doc);
    auto text = m.dump();
    CHECK(text.find("p%40ss") == std::string::npos);
    CHECK(text.find("plain") == std::string::npos);
    CHECK(text.find("s3") == std::string::npos);
    CHECK(text.find("pw@") == std::string::npos);
    CHECK(m["redis"]["url"] == "redis://:****@127.0.0.1:6379/0");
    CHECK(m["redis"]["password"] == "****");
    CHECK(m["redis"]["sentinel"]["password"] == "****");
    CHECK(m["redis"]["sentinel"]["nodes"][0] == "a:1");
    // An environment variable's name is not a secret.
    CHECK(m["identity"]["user"]["jwt"]["hmac_secret_env"] == "JWT_SECRET");
    CHECK(m["other"][0] == "redis://user:****@h:1/0");
    CHECK(m["other"][1] == "redis://user@h:1/0");
    CHECK(m["other"][2] == "http://x.example/a@b");
    CHECK(m["other"][3] == "weird://****@c d");
}
