// The connect handshake, sans-I/O (limiters/redis/handshake.hpp): the rounds and their bytes,
// and the judgement of the server's replies, given as the bytes a server sends (read through
// the multiplexer's RESP reader, as the connection reads them). No socket.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "limiters/redis/handshake.hpp"
#include "limiters/redis/multiplexer.hpp"

using namespace rategate::limiters::redis;
using verdict = handshake_verdict::kind;

namespace {

const std::string where = "10.0.0.5:6379";
const std::string sha1 = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
const std::string sha2 = "a42059b356c875f0717db19a51f6aaca9ae659ea";

// The steps of one round written through a multiplexer (the bytes are checked against
// `written`), the server's `wire` bytes read back, and each step judged.
struct played {
    std::string written;
    std::vector<handshake_verdict> verdicts;
    std::vector<reply> replies;
};
played play(std::vector<handshake_step> round, const std::string& wire,
            bool require_master = true) {
    multiplexer m;
    std::vector<std::shared_ptr<reply_slot>> slots;
    for (auto& step : round) {
        slots.push_back(std::make_shared<reply_slot>());
        m.push(step.encoded, slots.back());
    }
    played out;
    out.written = std::string(m.prepare_write());
    m.commit_write(std::chrono::steady_clock::now());
    REQUIRE_FALSE(m.consume(wire.data(), wire.size()));
    for (std::size_t i = 0; i < round.size(); ++i) {
        REQUIRE(slots[i]->done());
        out.verdicts.push_back(
            judge(round[i], slots[i]->error(), slots[i]->value(), where, require_master));
        out.replies.push_back(slots[i]->value());
    }
    return out;
}

const std::string role_master = "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n";
const std::string role_slave =
    "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:14\r\n";

}  // namespace

TEST_CASE("handshake: no password, no db, no script: ROLE alone") {
    auto rounds = plan_handshake({}, {});
    REQUIRE(rounds.size() == 1);
    REQUIRE(rounds[0].size() == 1);
    CHECK(rounds[0][0].what == handshake_step::kind::role);
    auto p = play(rounds[0], role_master);
    CHECK(p.written == "*1\r\n$4\r\nROLE\r\n");
    CHECK(p.verdicts[0].ok());
    CHECK(p.verdicts[0].why.empty());
}

TEST_CASE("handshake: AUTH goes alone, first; then SELECT, SCRIPT LOADs and ROLE in one write") {
    std::vector<script> scripts{{"chain", "return 1"}, {"refund", "return 2"}};
    handshake_params params{"", "s3cret", 2};
    auto rounds = plan_handshake(params, scripts);
    REQUIRE(rounds.size() == 2);
    REQUIRE(rounds[0].size() == 1);
    CHECK(rounds[0][0].what == handshake_step::kind::auth);
    CHECK(rounds[0][0].encoded == "*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n");

    auto auth = play(rounds[0], "+OK\r\n");
    CHECK(auth.verdicts[0].ok());

    REQUIRE(rounds[1].size() == 4);
    auto second =
        play(rounds[1], "+OK\r\n$40\r\n" + sha1 + "\r\n$40\r\n" + sha2 + "\r\n" + role_master);
    CHECK(second.written ==
          "*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n"
          "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$8\r\nreturn 1\r\n"
          "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$8\r\nreturn 2\r\n"
          "*1\r\n$4\r\nROLE\r\n");
    for (const auto& v : second.verdicts)
        CHECK(v.ok());
    // The SHA1 of each script is the SCRIPT LOAD step's reply, in script order.
    CHECK(rounds[1][1].what == handshake_step::kind::script_load);
    CHECK(rounds[1][1].script == 0);
    CHECK(rounds[1][1].name == "SCRIPT LOAD chain");
    CHECK(second.replies[1].str == sha1);
    CHECK(rounds[1][2].script == 1);
    CHECK(second.replies[2].str == sha2);
}

TEST_CASE("handshake: AUTH with an ACL user sends the user first") {
    auto rounds = plan_handshake({"gateway", "pw", 0}, {});
    REQUIRE(rounds.size() == 2);
    CHECK(rounds[0][0].encoded == "*3\r\n$4\r\nAUTH\r\n$7\r\ngateway\r\n$2\r\npw\r\n");
    CHECK(rounds[1].size() == 1);  // db 0: no SELECT
}

TEST_CASE("handshake: a refused AUTH, SELECT or SCRIPT LOAD names itself") {
    auto rounds = plan_handshake({"", "wrong", 16}, {{"chain", "syntax error("}});
    auto auth =
        play(rounds[0], "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    CHECK(auth.verdicts[0].k == verdict::auth_failed);
    CHECK(auth.verdicts[0].why ==
          "AUTH refused by Redis: WRONGPASS invalid username-password pair or user is disabled.");
    auto noauth = play(rounds[0],
                       "-ERR AUTH <password> called without any password configured "
                       "for the default user.\r\n");
    CHECK(noauth.verdicts[0].k == verdict::auth_failed);

    auto second = play(rounds[1],
                       "-ERR DB index is out of range\r\n"
                       "-ERR Error compiling script (new function): user_script:1: '<eof>'\r\n" +
                           role_master);
    CHECK(second.verdicts[0].k == verdict::refused);
    CHECK(second.verdicts[0].why == "SELECT refused by Redis: ERR DB index is out of range");
    CHECK(second.verdicts[1].k == verdict::refused);
    CHECK(second.verdicts[1].why ==
          "SCRIPT LOAD chain refused by Redis: ERR Error compiling script (new function): "
          "user_script:1: '<eof>'");
    CHECK(second.verdicts[2].ok());
}

TEST_CASE("handshake: ROLE must say master, unless only metadata is read") {
    auto role = plan_handshake({}, {})[0];
    auto slave = play(role, role_slave);
    CHECK(slave.verdicts[0].k == verdict::wrong_role);
    CHECK(slave.verdicts[0].why == "Redis at 10.0.0.5:6379 is a slave, not a master");
    CHECK(play(role, role_slave, false).verdicts[0].ok());

    auto sentinel = play(role, "*2\r\n$8\r\nsentinel\r\n*1\r\n$8\r\nmymaster\r\n");
    CHECK(sentinel.verdicts[0].k == verdict::wrong_role);
    CHECK(sentinel.verdicts[0].why == "Redis at 10.0.0.5:6379 is a sentinel, not a master");

    // Not usable now: an unavailable error, whatever require_master says.
    auto loading = play(role, "-LOADING Redis is loading the dataset in memory\r\n", false);
    CHECK(loading.verdicts[0].k == verdict::unavailable);
    CHECK(loading.verdicts[0].why ==
          "Redis at 10.0.0.5:6379 answered ROLE with LOADING Redis is loading the dataset in "
          "memory");
    CHECK(play(role, "-MASTERDOWN Link with MASTER is down\r\n").verdicts[0].k ==
          verdict::unavailable);

    // A user whose ACL forbids ROLE is taken at its word; so is an answer that is not an array.
    CHECK(play(role, "-NOPERM User gw has no permissions to run the 'role' command\r\n")
              .verdicts[0]
              .ok());
    CHECK(play(role, "*0\r\n").verdicts[0].ok());
    CHECK(play(role, "+OK\r\n").verdicts[0].ok());
}

TEST_CASE("handshake: a step with no reply fails as a transport error") {
    auto rounds = plan_handshake({"", "pw", 0}, {});
    auto v =
        judge(rounds[0][0], make_error_code(client_error::connection_lost), reply{}, where, true);
    CHECK(v.k == verdict::transport);
    CHECK(v.why == "AUTH failed: " + make_error_code(client_error::connection_lost).message());
}

TEST_CASE("role_problem: the ROLE re-check of a ready connection") {
    reply master;
    master.type = reply::kind::array;
    master.elements.resize(1);
    master.elements[0].type = reply::kind::string;
    master.elements[0].str = "master";
    CHECK(role_problem(master, where, true).empty());
    master.elements[0].str = "slave";
    CHECK(role_problem(master, where, true) == "Redis at 10.0.0.5:6379 is a slave, not a master");
    CHECK(role_problem(master, where, false).empty());
}
