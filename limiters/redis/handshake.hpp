// The connect handshake of a Redis connection, sans-I/O: which commands go, in which rounds,
// encoded to bytes; and the judgement of each reply. The connection (connection_state.cpp)
// writes a round, reads its replies and asks judge() about each; nothing here opens a socket.
//
//   round 1   AUTH [username] password            (only with a password; alone, because Redis
//                                                   drops an unauthenticated client that sends
//                                                   a large command before AUTH's reply)
//   round 2   SELECT db (db != 0), SCRIPT LOAD per script, ROLE   (one write, replies in order)
//
// ROLE is last: "ready" means the server answers and, when require_master, is a master (our
// scripts write). hiredis speaks RESP2 only, so there is no HELLO.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "limiters/redis/reply.hpp"

namespace rategate::limiters::redis {

/// A Lua script loaded on every connect and called by SHA1.
struct script {
    std::string name;  ///< for messages
    std::string source;
};

/// What the handshake needs to know of the connection's settings.
struct handshake_params {
    std::string_view username;  ///< ACL user (empty: AUTH with the password alone)
    std::string_view password;  ///< empty: no AUTH
    int db = 0;                 ///< 0: no SELECT
};

/// One command of the handshake.
struct handshake_step {
    enum class kind { auth, select, script_load, role };
    kind what;
    std::string name;        ///< for messages: "AUTH", "SELECT", "SCRIPT LOAD <name>", "ROLE"
    std::string encoded;     ///< the RESP bytes to write
    std::size_t script = 0;  ///< script_load: the script's index
};

/// The handshake as rounds of steps (one or two, the last ending with ROLE): each round is
/// written at once, and its replies read and judged before the next round goes. SCRIPT LOAD
/// steps follow the order of `scripts`.
std::vector<std::vector<handshake_step>> plan_handshake(const handshake_params& params,
                                                        const std::vector<script>& scripts);

/// The judgement of one step's outcome.
struct handshake_verdict {
    enum class kind {
        ok,
        transport,    ///< no reply (the step's request failed: `ec`)
        auth_failed,  ///< AUTH answered with an error (WRONGPASS, NOAUTH, ...)
        refused,      ///< SELECT or SCRIPT LOAD answered with an error
        unavailable,  ///< ROLE answered READONLY, LOADING, MASTERDOWN, ... (not usable now)
        wrong_role,   ///< ROLE says replica or sentinel where a master is required
    };
    kind k = kind::ok;
    std::string why;  ///< for last_error(); "" when ok

    bool ok() const { return k == kind::ok; }
};

/// Judges one step: `ec` is the request's transport error (then `r` is ignored), else `r` its
/// reply. `where` ("host:port") goes into the ROLE messages. A user whose ACL forbids ROLE
/// (NOPERM, or any error that is not an unavailable one) is taken at its word: ok.
handshake_verdict judge(const handshake_step& step, std::error_code ec, const reply& r,
                        std::string_view where, bool require_master);

/// Why a ROLE reply rules the server at `where` out ("" when it is usable): an unavailable
/// error, or (with `require_master`) an array whose first element is not "master". Also used
/// for the ROLE re-check of a ready connection.
std::string role_problem(const reply& r, std::string_view where, bool require_master);

}  // namespace rategate::limiters::redis
