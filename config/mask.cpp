#include "config/mask.hpp"

#include <algorithm>
#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>
#include <string>

namespace rategate::config {

namespace {

bool names_secret(std::string key) {
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (key.size() >= 4 && key.compare(key.size() - 4, 4, "_env") == 0) return false;
    for (const char* word : {"password", "passwd", "secret", "token", "credential"})
        if (key.find(word) != std::string::npos) return true;
    return false;
}

// A URL's password masked; any other string unchanged.
std::string mask_url(const std::string& s) {
    if (s.find("://") == std::string::npos || s.find('@') == std::string::npos) return s;
    auto parsed = boost::urls::parse_uri(s);
    if (!parsed) {
        // Not a valid URI but shaped like one: mask everything between "://" and the last '@'.
        auto start = s.find("://") + 3;
        auto at = s.rfind('@');
        if (at < start) return s;
        return s.substr(0, start) + masked_secret + s.substr(at);
    }
    if (!parsed->has_password()) return s;
    boost::urls::url u(*parsed);
    u.set_password(masked_secret);
    return std::string(u.buffer());
}

void mask(nlohmann::json& j) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (names_secret(it.key()) && !it.value().is_null() && !it.value().is_object() &&
                !it.value().is_array())
                it.value() = masked_secret;
            else
                mask(it.value());
        }
    } else if (j.is_array()) {
        for (auto& e : j)
            mask(e);
    } else if (j.is_string()) {
        j = mask_url(j.get<std::string>());
    }
}

}  // namespace

nlohmann::json mask_secrets(const nlohmann::json& doc) {
    nlohmann::json out = doc;
    mask(out);
    return out;
}

}  // namespace rategate::config
