// A Redis reply as plain data (RESP2), and command encoding. hiredis 0.14 supplies the wire
// format only; sockets and pipelining are ours (connection.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rategate::limiters::redis {

/// One RESP2 reply. An error reply (`-ERR ...`) is data, not a transport failure.
struct reply {
    enum class kind { nil, status, error, integer, string, array };
    kind type = kind::nil;
    std::int64_t integer = 0;
    std::string str;  ///< status, error or bulk string
    std::vector<reply> elements;

    bool is_error() const { return type == kind::error; }
    /// True for an error reply whose code is `code` (e.g. "NOSCRIPT").
    bool is_error(std::string_view code) const {
        return type == kind::error && str.compare(0, code.size(), code) == 0;
    }
    /// The code of an error reply: its first word ("WRONGPASS", "ERR"); "" for other replies.
    std::string_view error_code() const;
    /// True for an error reply that says the server cannot serve writes right now rather than
    /// that the command was wrong: READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, OOM, BUSY. The
    /// call fails and the connection re-checks the server (SPEC §2 "Redis deployments").
    bool is_unavailable_error() const;
};

/// Encodes a command as a RESP array of bulk strings (hiredis `redisFormatSdsCommandArgv`).
std::string encode_command(const std::vector<std::string_view>& args);

/// encode_command for a fixed argument list: command("SET", key, value). (g++ 12 rejects a
/// braced list inside a co_await expression; this keeps call sites in coroutines short.)
template <class... Args>
std::string command(const Args&... args) {
    return encode_command(std::vector<std::string_view>{std::string_view(args)...});
}

/// Appends the encoding of `args` to `out` (no intermediate allocation per command).
void append_command(std::string& out, const std::vector<std::string_view>& args);

}  // namespace rategate::limiters::redis
