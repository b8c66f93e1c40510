#include "limiters/redis/reply.hpp"

#include <hiredis/hiredis.h>

#include <array>
#include <stdexcept>

namespace rategate::limiters::redis {

std::string_view reply::error_code() const {
    if (type != kind::error) return {};
    std::string_view s(str);
    return s.substr(0, s.find(' '));
}

bool reply::is_unavailable_error() const {
    static constexpr std::array<std::string_view, 6> codes = {
        "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "OOM", "BUSY"};
    auto code = error_code();
    for (auto c : codes)
        if (code == c) return true;
    return false;
}

void append_command(std::string& out, const std::vector<std::string_view>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    argv.reserve(args.size());
    lens.reserve(args.size());
    for (auto a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    // The sds formatter writes lengths with hiredis's own integer formatting; the plain one calls
    // sprintf for every argument (about 700 instructions each; a batched call has one per key).
    sds cmd = nullptr;
    int n =
        redisFormatSdsCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (n < 0) throw std::bad_alloc();
    out.append(cmd, static_cast<std::size_t>(n));
    redisFreeSdsCommand(cmd);
}

std::string encode_command(const std::vector<std::string_view>& args) {
    std::string out;
    append_command(out, args);
    return out;
}

}  // namespace rategate::limiters::redis
