#include <arpa/inet.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "gateway/identity/client_ip.hpp"

using namespace rategate::gateway::identity;
using rategate::config::cidr;

namespace {

cidr block(const std::string& text) {
    cidr c;
    c.text = text;
    auto slash = text.find('/');
    auto addr = text.substr(0, slash);
    unsigned char b[16];
    if (inet_pton(AF_INET, addr.c_str(), b) == 1)
        c.bytes.assign(b, b + 4);
    else if (inet_pton(AF_INET6, addr.c_str(), b) == 1)
        c.bytes.assign(b, b + 16);
    else
        FAIL("bad block " << text);
    c.prefix = slash == std::string::npos ? static_cast<int>(c.bytes.size() * 8)
                                          : std::stoi(text.substr(slash + 1));
    return c;
}

struct fixture {
    std::vector<cidr> trusted{block("127.0.0.1/32"), block("10.0.0.0/8"), block("::1/128"),
                              block("2001:db8:ffff::/48")};
    std::string resolve(std::string_view peer, std::vector<std::string_view> lines,
                        header_kind kind = header_kind::x_forwarded_for) const {
        settings s{kind, &trusted};
        return resolve_client_ip(peer, lines, s);
    }
};

}  // namespace

TEST_CASE("canonical_ip: one text per address") {
    struct row {
        const char* in;
        const char* out;
    };
    const row rows[] = {
        // IPv6 in three notations, and RFC 5952 details
        {"2001:db8::1", "2001:db8::1"},
        {"2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"},
        {"2001:DB8::1", "2001:db8::1"},
        {"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},     // the first of two equal runs
        {"2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"},  // a lone zero group is not "::"
        {"2001:0:0:1:0:0:0:1", "2001:0:0:1::1"},           // the longest run
        {"::1", "::1"},
        {"::102:304", "::102:304"},  // IPv4-compatible (deprecated) stays IPv6 hex
        {"::0.0.0.2", "::2"},
        {"fe80::", "fe80::"},
        {"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"},
        // IPv4-mapped IPv6 is the IPv4 address
        {"::ffff:192.0.2.1", "192.0.2.1"},
        {"::FFFF:192.0.2.1", "192.0.2.1"},
        {"::ffff:c000:0201", "192.0.2.1"},
        {"::FFFF:C000:201", "192.0.2.1"},
        {"0:0:0:0:0:ffff:c000:201", "192.0.2.1"},
        {"0000:0000:0000:0000:0000:FFFF:192.0.2.1", "192.0.2.1"},
        {"[::ffff:192.0.2.1]:443", "192.0.2.1"},
        // zone ids, ports, brackets, quotes, whitespace
        {"fe80::1%eth0", "fe80::1"},
        {"[fe80::1%25eth0]:8080", "fe80::1"},
        {"[2001:db8::1]", "2001:db8::1"},
        {"[2001:db8::1]:4711", "2001:db8::1"},
        {"\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::17"},
        {"[2001:db8::1]:_obf", "2001:db8::1"},
        {"192.0.2.1:8080", "192.0.2.1"},
        {"192.0.2.1:_x9", "192.0.2.1"},
        {"  192.0.2.1\t", "192.0.2.1"},
        {"\"192.0.2.1\"", "192.0.2.1"},
        {"255.255.255.255", "255.255.255.255"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.in);
        auto got = canonical_ip(r.in);
        REQUIRE(got);
        CHECK(*got == r.out);
        CHECK(canonical_ip(*got) == got);  // idempotent
    }
}

TEST_CASE("canonical_ip: what is not an address") {
    const char* rows[] = {"", " ", "unknown", "_hidden", "_SEVKISEK", "not an ip", "999.1.1.1",
                          "256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "x1.2.3.4", "1.2.3.4x",
                          "1.2.3.-4", "+1.2.3.4", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:8o",
                          "1.2.3.4:_", "1.2.3.4%eth0", "[1.2.3.4]", "[2001:db8::1",
                          "[2001:db8::1]x", "[2001:db8::1]:", "2001:db8::1]", "2001:db8:::1",
                          "2001:db8::1::2", "12345::1", "g::1", "fe80::1%", "fe80::1%eth 0", "\"",
                          "\"\"", "1.2.3.4, 5.6.7.8", "localhost", "0x7f.0.0.1", "2130706433",
                          // the unspecified address names no client, in any notation
                          "0.0.0.0", "0.0.0.0:80", "::", "[::]", "[::]:443", "0:0:0:0:0:0:0:0",
                          "::ffff:0.0.0.0", "\"[::]\""};
    for (const char* in : rows) {
        CAPTURE(in);
        CHECK_FALSE(canonical_ip(in));
    }
    CHECK_FALSE(canonical_ip(std::string_view("1.2.3.4\0", 8)));
    CHECK_FALSE(canonical_ip(std::string(100, '1')));
}

TEST_CASE("in_cidr compares canonical bytes") {
    CHECK(in_cidr("10.1.2.3", block("10.0.0.0/8")));
    CHECK_FALSE(in_cidr("11.1.2.3", block("10.0.0.0/8")));
    CHECK(in_cidr("::ffff:10.1.2.3", block("10.0.0.0/8")));  // IPv4-mapped peer: IPv4
    CHECK(in_cidr("[::FFFF:a01:203]:80", block("10.0.0.0/8")));
    CHECK(in_cidr("10.1.2.3", block("::ffff:10.0.0.0/104")));  // block written IPv4-mapped
    CHECK_FALSE(in_cidr("11.1.2.3", block("::ffff:10.0.0.0/104")));
    CHECK_FALSE(in_cidr("10.1.2.3", block("::/0")));  // an IPv6 block of IPv6 addresses only
    CHECK(in_cidr("2001:db8::1", block("::/0")));
    CHECK(in_cidr("2001:DB8:0::1", block("2001:db8::/32")));
    CHECK_FALSE(in_cidr("2001:db9::1", block("2001:db8::/32")));
    CHECK(in_cidr("fe80::1%eth0", block("fe80::/10")));
    CHECK(in_cidr("1.2.3.4", block("0.0.0.0/0")));
    CHECK(in_cidr("192.0.2.129", block("192.0.2.128/25")));
    CHECK_FALSE(in_cidr("192.0.2.127", block("192.0.2.128/25")));
    CHECK_FALSE(in_cidr("unknown", block("0.0.0.0/0")));
    CHECK_FALSE(in_cidr("2001:db8::1", block("10.0.0.0/8")));
    std::vector<cidr> blocks{block("127.0.0.1/32"), block("::1/128")};
    CHECK(is_trusted("127.0.0.1", blocks));
    CHECK(is_trusted("::ffff:127.0.0.1", blocks));
    CHECK(is_trusted("0:0:0:0:0:0:0:1", blocks));
    CHECK_FALSE(is_trusted("127.0.0.2", blocks));
}

TEST_CASE("kind_of names the header kind case-insensitively") {
    CHECK(kind_of("X-Forwarded-For") == header_kind::x_forwarded_for);
    CHECK(kind_of("x-forwarded-for") == header_kind::x_forwarded_for);
    CHECK(kind_of("FORWARDED") == header_kind::forwarded);
    CHECK(kind_of("X-Real-IP") == header_kind::single);
    CHECK(kind_of("X-Forwarded-Fo") == header_kind::single);
    rategate::config::identity_config id;
    CHECK(settings::from(id).header == header_kind::x_forwarded_for);
    id.client_ip_header = "forwarded";
    CHECK(settings::from(id).header == header_kind::forwarded);
    CHECK(settings::from(id).trusted_proxies == &id.trusted_proxies);
}

TEST_CASE("X-Forwarded-For walk") {
    fixture f;
    struct row {
        const char* name;
        const char* peer;
        std::vector<std::string_view> lines;
        const char* client;
    };
    const std::vector<row> rows = {
        {"untrusted peer ignores the header", "203.0.113.9", {"6.6.6.6"}, "203.0.113.9"},
        {"untrusted peer is canonical too", "::FFFF:203.0.113.9", {"6.6.6.6"}, "203.0.113.9"},
        {"no header: the peer", "127.0.0.1", {}, "127.0.0.1"},
        {"empty header: the peer", "127.0.0.1", {""}, "127.0.0.1"},
        {"one entry", "127.0.0.1", {"203.0.113.7"}, "203.0.113.7"},
        {"right-most untrusted", "127.0.0.1", {"6.6.6.6, 203.0.113.7"}, "203.0.113.7"},
        {"forged first line, trusted proxy's line after it",
         "127.0.0.1",
         {"6.6.6.6", "203.0.113.7"},
         "203.0.113.7"},
        {"lines form one list", "127.0.0.1", {"6.6.6.6", "203.0.113.7, 10.0.0.2"}, "203.0.113.7"},
        {"trusted hops skipped",
         "10.9.9.9",
         {"6.6.6.6, 203.0.113.7, 10.0.0.1, 127.0.0.1"},
         "203.0.113.7"},
        {"trusted IPv6 hops, mapped and bracketed",
         "::1",
         {"203.0.113.7, [2001:db8:ffff::2]:99, ::ffff:10.1.1.1"},
         "203.0.113.7"},
        {"IPv4-mapped trusted peer", "::ffff:127.0.0.1", {"203.0.113.7"}, "203.0.113.7"},
        {"client address is canonical", "127.0.0.1", {"2001:0DB8:0:0::0001"}, "2001:db8::1"},
        {"client with port", "127.0.0.1", {"203.0.113.7:5555"}, "203.0.113.7"},
        {"all trusted: the left-most", "127.0.0.1", {"10.0.0.3, 10.0.0.2", "10.0.0.1"}, "10.0.0.3"},
        {"empty elements ignored", "127.0.0.1", {" , 6.6.6.6,, 203.0.113.7 ,", ","}, "203.0.113.7"},
        {"unknown stops at the hop that passed it", "127.0.0.1", {"unknown"}, "127.0.0.1"},
        {"999.1.1.1 stops", "127.0.0.1", {"999.1.1.1"}, "127.0.0.1"},
        {"garbage stops", "127.0.0.1", {"not an ip"}, "127.0.0.1"},
        {"garbage behind a trusted hop",
         "127.0.0.1",
         {"203.0.113.7, garbage, 10.0.0.5"},
         "10.0.0.5"},
        {"garbage left of the client is never reached",
         "127.0.0.1",
         {"garbage, 203.0.113.7"},
         "203.0.113.7"},
        {"an unbalanced quote cannot swallow the proxy's entry",
         "127.0.0.1",
         {"\"6.6.6.6, 203.0.113.7"},
         "203.0.113.7"},
        {"quoted bracketed entry", "127.0.0.1", {"\"[2001:db8:cafe::17]\""}, "2001:db8:cafe::17"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.name);
        CHECK(f.resolve(r.peer, r.lines) == r.client);
    }
    // Every kind of garbage from one trusted hop shares the hop's counter.
    for (const char* g : {"unknown", "999.1.1.1", "not an ip", "_hidden", "1.2.3", "[::1"})
        CHECK(f.resolve("10.0.0.7", {g}) == "10.0.0.7");
    // A peer that is not an address (the socket was gone): no client address at all.
    CHECK(f.resolve("unknown", {"203.0.113.7"}) == "");
    // No trusted list: nobody is believed.
    settings none{header_kind::x_forwarded_for, nullptr};
    CHECK(resolve_client_ip("127.0.0.1", {"203.0.113.7"}, none) == "127.0.0.1");
}

TEST_CASE("Forwarded (RFC 7239) walk") {
    fixture f;
    auto fwd = [&](std::vector<std::string_view> lines, const char* peer = "127.0.0.1") {
        return f.resolve(peer, lines, header_kind::forwarded);
    };
    // RFC 7239 §4 examples
    CHECK(fwd({"for=\"_gazonk\""}) == "127.0.0.1");
    CHECK(fwd({"For=\"[2001:db8:cafe::17]:4711\""}) == "2001:db8:cafe::17");
    CHECK(fwd({"for=192.0.2.60;proto=http;by=203.0.113.43"}) == "192.0.2.60");
    CHECK(fwd({"for=192.0.2.43, for=198.51.100.17"}) == "198.51.100.17");
    // RFC 7239 §7.4 (transition from X-Forwarded-For)
    CHECK(fwd({"for=192.0.2.43, for=\"[2001:db8:cafe::17]\""}) == "2001:db8:cafe::17");
    CHECK(fwd({"for=192.0.2.43, for=\"[2001:db8:cafe::17]\", for=unknown"}) == "127.0.0.1");
    // §5.2 / §6.3: unknown and obfuscated nodes stop the walk at the hop that passed them
    CHECK(fwd({"for=unknown"}) == "127.0.0.1");
    CHECK(fwd({"for=_hidden, for=10.0.0.4"}) == "10.0.0.4");
    CHECK(fwd({"for=\"[2001:db8::1]:_port\""}) == "2001:db8::1");
    CHECK(fwd({"for=\"192.0.2.43:47011\""}) == "192.0.2.43");
    // an element without `for` is not an address
    CHECK(fwd({"for=192.0.2.43, by=10.0.0.1;proto=https"}) == "127.0.0.1");
    CHECK(fwd({"for=192.0.2.43, ;"}) == "127.0.0.1");
    // malformed elements: pair without '=', `for` twice, unterminated or trailing quotes
    CHECK(fwd({"for"}) == "127.0.0.1");
    CHECK(fwd({"for=192.0.2.1;for=192.0.2.2"}) == "127.0.0.1");
    CHECK(fwd({"for=\"192.0.2.1"}) == "127.0.0.1");
    CHECK(fwd({"for=\"192.0.2.1\"x"}) == "127.0.0.1");
    // names are case-insensitive, escapes in quoted-strings honoured, OWS allowed
    CHECK(fwd({"FOR=\"\\1\\92.0.2.9\""}) == "192.0.2.9");
    CHECK(fwd({" proto=https ; for=192.0.2.9 "}) == "192.0.2.9");
    // several field lines form one list; empty elements ignored
    CHECK(fwd({"for=6.6.6.6", "for=203.0.113.7;by=10.0.0.1", ", ,"}) == "203.0.113.7");
    CHECK(fwd({"for=10.0.0.3", "for=10.0.0.2"}) == "10.0.0.3");  // all trusted
    // a client's unbalanced quote cannot swallow the element a proxy appended to the line
    CHECK(fwd({"for=\"6.6.6.6, for=203.0.113.7"}) == "203.0.113.7");
    // untrusted peer: the header is ignored
    CHECK(fwd({"for=192.0.2.60"}, "198.51.100.1") == "198.51.100.1");
}

TEST_CASE("Forwarded: an element outside RFC 7239 section 4's grammar is not an address") {
    fixture f;
    auto fwd = [&](std::vector<std::string_view> lines) {
        return f.resolve("127.0.0.1", lines, header_kind::forwarded);
    };
    const char* rows[] = {
        "for=192.0.2.43:47011",                   // a port must be quoted (':' is not tchar)
        "for=[2001:db8:cafe::17]",                // an IPv6 address must be quoted
        "for=2001:db8:cafe::17",                  // and bracketed
        "for = 192.0.2.43",                       // no whitespace around '='
        "for =192.0.2.43",                        //
        "for= 192.0.2.43",                        //
        "fo r=192.0.2.43",                        // a parameter name is a token
        "for@=192.0.2.43",                        //
        "=192.0.2.43",                            //
        "for=",                                   // a value is token / quoted-string, never empty
        "proto=https;PROTO=http;for=192.0.2.43",  // any parameter at most once
        "for=192.0.2.43;by=[10.0.0.1]",           // the whole element must parse, not only `for`
        "for=\"[1.2.3.4]\"",                      // brackets hold IPv6 only
        "for=\"0.0.0.0\"",                        // the unspecified address
        "for=\"[::]:80\"",                        //
    };
    for (const char* r : rows) {
        CAPTURE(r);
        // The bad element stops the walk: the trusted peer that passed it is the client,
        // never the forged address, and never an entry left of it.
        CHECK(fwd({r}) == "127.0.0.1");
        CHECK(fwd({"for=198.51.100.9", r}) == "127.0.0.1");
    }
    // A bad element left of the client is never reached.
    CHECK(fwd({"for = 6.6.6.6, for=203.0.113.7"}) == "203.0.113.7");
    // Tolerated: OWS around ';' and ',', quoted values, tokens, case-insensitive names.
    CHECK(fwd({"for=192.0.2.43 ;proto=http"}) == "192.0.2.43");
    CHECK(fwd({"host=\"a.example:8080\";for=\"[2001:db8::1]:_p\""}) == "2001:db8::1");
}

TEST_CASE("X-Forwarded-For: 0.0.0.0 and :: are not client addresses") {
    fixture f;
    // A forged unspecified address stops the walk at the trusted hop, as garbage does.
    CHECK(f.resolve("127.0.0.1", {"0.0.0.0"}) == "127.0.0.1");
    CHECK(f.resolve("127.0.0.1", {"::"}) == "127.0.0.1");
    CHECK(f.resolve("127.0.0.1", {"203.0.113.7, [::]:80"}) == "127.0.0.1");
    CHECK(f.resolve("10.0.0.1", {"203.0.113.7, 0.0.0.0, 10.0.0.2"}) == "10.0.0.2");
    CHECK(f.resolve("127.0.0.1", {"[1.1.1.1]"}) == "127.0.0.1");
}

TEST_CASE("trusted_hops: the peer and the N - 1 right-most entries, whatever their addresses") {
    const std::vector<cidr> none;
    const std::vector<cidr> ten{block("10.0.0.0/8")};
    auto resolve = [](unsigned hops, const std::vector<cidr>& blocks, std::string_view peer,
                      std::vector<std::string_view> lines,
                      header_kind kind = header_kind::x_forwarded_for) {
        settings s{kind, &blocks, hops};
        return resolve_client_ip(peer, lines, s);
    };
    const char* xff = "192.0.2.10, 198.51.100.1, 203.0.113.1";
    // Envoy's xff_num_trusted_hops with use_remote_address: the N-th address from the right.
    CHECK(resolve(1, none, "203.0.113.128", {xff}) == "203.0.113.1");
    CHECK(resolve(2, none, "203.0.113.128", {xff}) == "198.51.100.1");
    CHECK(resolve(3, none, "203.0.113.128", {xff}) == "192.0.2.10");
    CHECK(resolve(9, none, "203.0.113.128", {xff}) == "192.0.2.10");     // all trusted: left-most
    CHECK(resolve(0, none, "203.0.113.128", {xff}) == "203.0.113.128");  // not set: the peer
    CHECK(resolve(1, none, "203.0.113.128", {}) == "203.0.113.128");
    // Lines form one list; positions count entries, not lines.
    CHECK(resolve(2, none, "203.0.113.128", {"192.0.2.10", "198.51.100.1, 203.0.113.1"}) ==
          "198.51.100.1");
    // Beside trusted_proxies a hop is trusted when either says so.
    CHECK(resolve(1, ten, "203.0.113.128", {"192.0.2.10, 10.1.1.1, 203.0.113.1"}) == "203.0.113.1");
    CHECK(resolve(2, ten, "203.0.113.128", {"192.0.2.10, 10.1.1.1, 203.0.113.1"}) == "192.0.2.10");
    // A non-address among the trusted hops still stops the walk.
    CHECK(resolve(3, none, "203.0.113.128", {"192.0.2.10, unknown, 203.0.113.1"}) == "203.0.113.1");
    CHECK(resolve(3, none, "203.0.113.128", {"192.0.2.10, 0.0.0.0, 203.0.113.1"}) == "203.0.113.1");
    CHECK(resolve(2, none, "203.0.113.128", {"for=192.0.2.10, for=\"[2001:db8::9]\""},
                  header_kind::forwarded) == "192.0.2.10");
}

TEST_CASE("one-address header (X-Real-IP)") {
    fixture f;
    auto real = [&](std::vector<std::string_view> lines, const char* peer = "127.0.0.1") {
        return f.resolve(peer, lines, header_kind::single);
    };
    CHECK(real({"192.0.2.1"}) == "192.0.2.1");
    CHECK(real({" [2001:DB8::1]:80 "}) == "2001:db8::1");
    CHECK(real({"::ffff:192.0.2.1"}) == "192.0.2.1");
    CHECK(real({}) == "127.0.0.1");
    CHECK(real({"10.0.0.9"}) == "10.0.0.9");  // trusted, but the only (left-most) entry
    // several lines, a list, or garbage: not an address, the peer is the client
    CHECK(real({"192.0.2.1", "192.0.2.2"}) == "127.0.0.1");
    CHECK(real({"192.0.2.1, 192.0.2.2"}) == "127.0.0.1");
    CHECK(real({"unknown"}) == "127.0.0.1");
    CHECK(real({""}) == "127.0.0.1");
    CHECK(real({"192.0.2.1"}, "198.51.100.1") == "198.51.100.1");
}
