#include "limiters/redis/handshake.hpp"

namespace rategate::limiters::redis {

std::vector<std::vector<handshake_step>> plan_handshake(const handshake_params& params,
                                                        const std::vector<script>& scripts) {
    using kind = handshake_step::kind;
    std::vector<std::vector<handshake_step>> rounds;
    if (!params.password.empty())
        rounds.push_back(
            {{kind::auth, "AUTH",
              params.username.empty() ? command("AUTH", params.password)
                                      : command("AUTH", params.username, params.password)}});
    auto& last = rounds.emplace_back();
    if (params.db != 0)
        last.push_back({kind::select, "SELECT", command("SELECT", std::to_string(params.db))});
    for (std::size_t i = 0; i < scripts.size(); ++i)
        last.push_back({kind::script_load, "SCRIPT LOAD " + scripts[i].name,
                        command("SCRIPT", "LOAD", scripts[i].source), i});
    last.push_back({kind::role, "ROLE", command("ROLE")});
    return rounds;
}

handshake_verdict judge(const handshake_step& step, std::error_code ec, const reply& r,
                        std::string_view where, bool require_master) {
    using verdict = handshake_verdict::kind;
    if (ec) return {verdict::transport, step.name + " failed: " + ec.message()};
    if (step.what == handshake_step::kind::role) {
        auto why = role_problem(r, where, require_master);
        if (why.empty()) return {};
        return {r.is_error() ? verdict::unavailable : verdict::wrong_role, std::move(why)};
    }
    if (!r.is_error()) return {};
    return {step.what == handshake_step::kind::auth ? verdict::auth_failed : verdict::refused,
            step.name + " refused by Redis: " + r.str};
}

std::string role_problem(const reply& r, std::string_view where, bool require_master) {
    auto at = [&] { return "Redis at " + std::string(where); };
    if (r.is_unavailable_error()) return at() + " answered ROLE with " + r.str;
    if (require_master && r.type == reply::kind::array && !r.elements.empty() &&
        r.elements[0].str != "master")
        return at() + " is a " + r.elements[0].str + ", not a master";
    return {};
}

}  // namespace rategate::limiters::redis
