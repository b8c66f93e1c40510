// libFuzzer harness for the RESP reader as the Redis client uses it (limiters/redis/multiplexer):
// bytes fed in one read, split at a fuzzer-chosen point, and one byte at a time complete the
// same requests with the same replies and the same protocol verdict; every reply survives a
// re-encode and re-parse unchanged.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "limiters/redis/multiplexer.hpp"
#include "limiters/redis/reply.hpp"

using namespace rategate::limiters::redis;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

struct recorder final : reply_sink {
    std::vector<reply> got;
    void on_reply(std::error_code ec, reply&& r) override {
        require(!ec);  // consume() completes requests with replies, never with errors
        got.push_back(std::move(r));
    }
};

bool equal(const reply& a, const reply& b) {
    if (a.type != b.type || a.integer != b.integer || a.str != b.str ||
        a.elements.size() != b.elements.size())
        return false;
    for (std::size_t i = 0; i < a.elements.size(); ++i)
        if (!equal(a.elements[i], b.elements[i])) return false;
    return true;
}

void encode(const reply& r, std::string& out) {
    switch (r.type) {
        case reply::kind::nil:
            out += "$-1\r\n";
            break;
        case reply::kind::status:
            out += '+' + r.str + "\r\n";
            break;
        case reply::kind::error:
            out += '-' + r.str + "\r\n";
            break;
        case reply::kind::integer:
            out += ':' + std::to_string(r.integer) + "\r\n";
            break;
        case reply::kind::string:
            out += '$' + std::to_string(r.str.size()) + "\r\n" + r.str + "\r\n";
            break;
        case reply::kind::array:
            out += '*' + std::to_string(r.elements.size()) + "\r\n";
            for (const auto& e : r.elements)
                encode(e, out);
            break;
    }
}

struct setup {
    std::size_t requests;
    std::size_t replies_each;
    std::uint16_t abandoned;  ///< bit i: request i is abandoned after it was written
};

struct outcome {
    std::vector<reply> replies;
    bool protocol_error = false;
    std::size_t pending = 0;
};

// Writes `s.requests` commands, then feeds `wire` cut at `cuts` (ascending), stopping at the
// first error as the connection would.
outcome run(const setup& s, const std::string& wire, const std::vector<std::size_t>& cuts) {
    multiplexer m;
    auto rec = std::make_shared<recorder>();
    std::vector<multiplexer::handle> handles;
    for (std::size_t i = 0; i < s.requests; ++i)
        handles.push_back(m.push(command("GET", "k"), rec, s.replies_each));
    m.prepare_write();
    m.commit_write(std::chrono::steady_clock::now());
    for (std::size_t i = 0; i < s.requests; ++i)
        if (s.abandoned & (1u << i)) m.abandon(handles[i]);
    outcome out;
    std::size_t from = 0;
    for (std::size_t cut : cuts) {
        if (cut < from) continue;
        auto ec = m.consume(wire.data() + from, cut - from);
        from = cut;
        if (ec) {
            require(ec == client_error::protocol_error);
            out.protocol_error = true;
            break;
        }
    }
    out.replies = std::move(rec->got);
    out.pending = m.pending();
    require(out.pending <= s.requests);
    return out;
}

bool same(const outcome& a, const outcome& b) {
    if (a.protocol_error != b.protocol_error || a.pending != b.pending ||
        a.replies.size() != b.replies.size())
        return false;
    for (std::size_t i = 0; i < a.replies.size(); ++i)
        if (!equal(a.replies[i], b.replies[i])) return false;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // The last bytes steer the setup; the rest is what Redis sent.
    FuzzedDataProvider fdp(data, size);
    auto split = fdp.ConsumeIntegral<std::uint16_t>();
    setup s{fdp.ConsumeIntegralInRange<std::size_t>(0, 15),
            fdp.ConsumeIntegralInRange<std::size_t>(1, 3), fdp.ConsumeIntegral<std::uint16_t>()};
    auto wire = fdp.ConsumeRemainingBytesAsString();

    auto whole = run(s, wire, {wire.size()});
    std::size_t at = split % (wire.size() + 1);
    require(same(whole, run(s, wire, {at, wire.size()})));
    if (wire.size() <= 1024) {
        std::vector<std::size_t> bytes;
        for (std::size_t i = 1; i <= wire.size(); ++i)
            bytes.push_back(i);
        require(same(whole, run(s, wire, bytes)));
    }

    // Completed requests: every one not abandoned, in order, until the bytes or requests ran out.
    std::size_t live = 0;
    for (std::size_t i = 0; i < s.requests; ++i)
        live += (s.abandoned & (1u << i)) ? 0 : 1;
    require(whole.replies.size() <= live);

    // A reply re-encoded is read back as the same reply.
    for (const auto& r : whole.replies) {
        std::string again;
        encode(r, again);
        auto back = run(setup{1, 1, 0}, again, {again.size()});
        require(!back.protocol_error && back.pending == 0 && back.replies.size() == 1);
        require(equal(back.replies[0], r));
    }
    return 0;
}
