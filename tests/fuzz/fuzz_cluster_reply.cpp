// libFuzzer harness for the Redis Cluster and Sentinel replies as the gateway reads them
// (limiters/redis/cluster_slots.cpp, sentinel.cpp): whatever reply a server sends — any kinds,
// strings and integers, arrays nested up to depth 4 — parse_cluster_slots, parse_cluster_shards and
// parse_redirect either refuse it or give a map / redirection the cluster connection can use
// as is: every owner an index into masters(), every master reachable (a host, a port), every
// redirection inside the slot space. key_slot honours hash tags for every string met.
//
// The input is read by a FuzzedDataProvider: integers from the end, string bytes from the
// front. The seeds in tests/fuzz/corpus/fuzz_cluster_reply encode real replies (CLUSTER SLOTS
// and CLUSTER SHARDS of a three-master cluster, after a failover, MOVED and ASK) in that layout.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "limiters/redis/cluster_slots.hpp"
#include "limiters/redis/sentinel.hpp"

using namespace rategate::limiters::redis;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

// Words the parsers look for, so the fuzzer meets their branches without guessing them: short
// ones of CLUSTER SLOTS and CLUSTER SHARDS replies (field names, values, hosts)...
constexpr std::string_view words[] = {
    "slots",    "nodes",   "id",        "port",    "tls-port", "ip",     "endpoint",
    "hostname", "role",    "master",    "replica", "health",   "online", "fail",
    "failed",   "loading", "127.0.0.1", "::1",     "?",        "",       "a b"};
// ...and longer ones, with error replies.
constexpr std::string_view phrases[] = {
    "replication-offset", "redis-a.internal", "MOVED 1 127.0.0.1:6381", "ASK 16383 ::1:6379",
    "MOVED 3999 :6381",   "TRYAGAIN x",       "CLUSTERDOWN x"};

constexpr int max_depth = 4;
constexpr std::size_t max_elements = 16;

std::string text(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
        case 0:
            return std::string(
                words[in.ConsumeIntegralInRange<std::size_t>(0, std::size(words) - 1)]);
        case 1:
            return std::string(
                phrases[in.ConsumeIntegralInRange<std::size_t>(0, std::size(phrases) - 1)]);
        default:
            return in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(0, 64));
    }
}

std::int64_t number(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange<int>(0, 2)) {
        case 0:
            return in.ConsumeIntegralInRange<std::int64_t>(-1, slot_count);  // around slots
        case 1:
            return in.ConsumeIntegralInRange<std::int64_t>(0, 65536);  // around ports
        default:
            return in.ConsumeIntegral<std::int64_t>();
    }
}

// A reply of any kind, arrays only at depths below max_depth; nils once the input runs out.
reply build(FuzzedDataProvider& in, int depth) {
    reply r;
    int last = depth < max_depth ? static_cast<int>(reply::kind::array)
                                 : static_cast<int>(reply::kind::string);
    r.type = static_cast<reply::kind>(in.ConsumeIntegralInRange<int>(0, last));
    switch (r.type) {
        case reply::kind::nil:
            break;
        case reply::kind::status:
        case reply::kind::error:
        case reply::kind::string:
            r.str = text(in);
            break;
        case reply::kind::integer:
            r.integer = number(in);
            break;
        case reply::kind::array: {
            auto n = in.ConsumeIntegralInRange<std::size_t>(0, max_elements);
            for (std::size_t i = 0; i < n && in.remaining_bytes() > 0; ++i)
                r.elements.push_back(build(in, depth + 1));
            break;
        }
    }
    return r;
}

bool reachable(const endpoint& e) {
    return !e.host.empty() && e.host != "?" && e.port != 0;
}

void check_map(const slot_map& m) {
    const auto& masters = m.masters();
    std::vector<bool> owns(masters.size(), false);
    bool all = true;
    for (std::uint32_t s = 0; s < slot_count; ++s) {
        auto o = m.owner(static_cast<std::uint16_t>(s));
        if (!o) {
            all = false;
            continue;
        }
        require(*o < masters.size());
        owns[*o] = true;
    }
    require(m.complete() == all);
    require(!m.owner(slot_count).has_value());
    for (std::size_t i = 0; i < masters.size(); ++i) {
        require(reachable(masters[i].addr));
        require(owns[i]);  // only masters that serve a slot are listed
        for (std::size_t j = 0; j < i; ++j)
            require(!(masters[j].addr == masters[i].addr));  // each once
    }
}

// Every string in the reply, as a key: a tag's slot is the tag's own.
void check_keys(const reply& r) {
    if (r.type == reply::kind::array) {
        for (const auto& e : r.elements)
            check_keys(e);
        return;
    }
    const std::string& s = r.str;
    require(key_slot(s) < slot_count);
    if (!s.empty() && s.find('}') == std::string::npos) {
        require(key_slot("{" + s + "}") == key_slot(s));
        require(key_slot("rategate:{" + s + "}.x{y}") == key_slot(s));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    // The server asked: one with a host, or (a caller's bug) one without.
    endpoint asked{in.ConsumeBool() ? "10.0.0.9" : "", 7000};
    reply r = build(in, 0);

    if (auto m = parse_cluster_slots(r, asked)) check_map(*m);
    if (auto m = parse_cluster_shards(r, asked)) check_map(*m);
    if (auto red = parse_redirect(r, asked)) {
        require(r.is_error());
        require(red->slot < slot_count);
        require(reachable(red->to));
        require(!is_tryagain(r) && !is_clusterdown(r));
        // Written back as Redis writes it, it reads the same.
        reply again;
        again.type = reply::kind::error;
        again.str = std::string(red->k == redirect::moved ? "MOVED " : "ASK ") +
                    std::to_string(red->slot) + " " + red->to.host + ":" +
                    std::to_string(red->to.port);
        require(parse_redirect(again, endpoint{"elsewhere", 1}) == red);
    }
    require(!(is_tryagain(r) && is_clusterdown(r)));
    check_keys(r);
    // The Sentinel replies (limiters/redis/sentinel.cpp) from the same arbitrary replies.
    if (auto master = parse_master_addr(r)) {
        require(reachable(*master));
        require(r.type == reply::kind::array && r.elements.size() == 2);
    }
    if (auto to = parse_switch_master(r, "mymaster")) {
        require(reachable(*to));
        require(r.type == reply::kind::array && r.elements.size() == 3);
    }
    return 0;
}
