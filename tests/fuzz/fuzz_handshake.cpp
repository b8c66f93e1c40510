// libFuzzer harness for the connect handshake, sans-I/O (limiters/redis/handshake.cpp): for any
// settings (password, ACL user, db, scripts, require_master) and whatever bytes a server sends
// back, read through the multiplexer as the connection reads them, every answered step gets a
// judgement that agrees with its reply: ok exactly when it has no reason; a refused AUTH is an
// auth failure, a refused SELECT or SCRIPT LOAD a refusal, and only ROLE can be "unavailable"
// (an unavailable error reply) or "wrong role" (only when a master is required). A step with no
// reply is a transport failure.
//
// Layout of an input (FuzzedDataProvider: integers from the end, bytes from the front): the
// server's bytes, then 5 bytes read backwards: password?, user?, db (mod 17), scripts (mod 4),
// require_master?. The seeds in tests/fuzz/corpus/fuzz_handshake are real servers' answers.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "limiters/redis/handshake.hpp"
#include "limiters/redis/multiplexer.hpp"

using namespace rategate::limiters::redis;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

void check(const handshake_step& step, const handshake_verdict& v, const reply& r,
           bool require_master) {
    using kind = handshake_verdict::kind;
    require(v.ok() == v.why.empty());
    require(v.k != kind::transport);  // every judged step here has its reply
    if (step.what == handshake_step::kind::role) {
        require(v.k == kind::ok || v.k == kind::unavailable || v.k == kind::wrong_role);
        require((v.k == kind::unavailable) == r.is_unavailable_error());
        if (v.k == kind::wrong_role) {
            require(require_master && r.type == reply::kind::array && !r.elements.empty() &&
                    r.elements[0].str != "master");
        }
        require(v.ok() == role_problem(r, "h:1", require_master).empty());
        return;
    }
    require(v.ok() == !r.is_error());
    if (!v.ok())
        require(v.k ==
                (step.what == handshake_step::kind::auth ? kind::auth_failed : kind::refused));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    bool password = in.ConsumeBool();
    bool user = in.ConsumeBool();
    int db = in.ConsumeIntegralInRange<int>(0, 16);
    int script_count = in.ConsumeIntegralInRange<int>(0, 3);
    bool require_master = in.ConsumeBool();
    std::string wire = in.ConsumeRemainingBytesAsString();

    std::vector<script> scripts;
    for (int i = 0; i < script_count; ++i)
        scripts.push_back({"s" + std::to_string(i), "return " + std::to_string(i)});
    handshake_params params{user ? "gw" : "", password ? "pw" : "", db};
    auto rounds = plan_handshake(params, scripts);

    // The plan: AUTH alone first with a password; the last round ends with ROLE.
    require(!rounds.empty() && rounds.size() == (password ? 2u : 1u));
    require(rounds.back().back().what == handshake_step::kind::role);
    if (password) require(rounds[0].size() == 1);

    // The server's bytes answer the rounds in order, as far as they go.
    multiplexer m;
    std::size_t fed = 0;
    for (const auto& round : rounds) {
        std::vector<std::shared_ptr<reply_slot>> slots;
        for (const auto& step : round) {
            slots.push_back(std::make_shared<reply_slot>());
            m.push(step.encoded, slots.back());
        }
        m.prepare_write();
        m.commit_write(std::chrono::steady_clock::now());
        // Fed a byte at a time, so that a reply past the round's last is never read.
        while (!slots.back()->done() && fed < wire.size()) {
            if (m.consume(wire.data() + fed, 1)) return 0;  // garbage: the connection drops
            ++fed;
        }
        for (std::size_t i = 0; i < round.size(); ++i) {
            if (!slots[i]->done()) return 0;  // the server stopped talking
            auto v = judge(round[i], {}, slots[i]->value(), "h:1", require_master);
            check(round[i], v, slots[i]->value(), require_master);
            // Without a reply, any step is a transport failure.
            auto lost = judge(round[i], make_error_code(client_error::connection_lost), reply{},
                              "h:1", require_master);
            require(lost.k == handshake_verdict::kind::transport && !lost.why.empty());
            if (!v.ok()) return 0;  // the connection stops at the first refusal
        }
    }
    return 0;
}
