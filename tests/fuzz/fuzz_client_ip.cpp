// libFuzzer harness for gateway/identity/client_ip: the input's first line is the peer, the
// other lines are field lines of the forwarding header. Checks that canonical_ip is idempotent
// and prints only address characters, and that resolve_client_ip, for every header kind, returns
// canonical text: "" exactly when the peer is not an address, the peer itself when the peer is
// untrusted, and for X-Forwarded-For an address that was the peer or one of the entries.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <arpa/inet.h>

#include "gateway/identity/client_ip.hpp"

namespace id = rategate::gateway::identity;
using rategate::config::cidr;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

cidr block(const char* addr, int prefix) {
    cidr c;
    c.text = addr;
    c.prefix = prefix;
    unsigned char b[16];
    if (inet_pton(AF_INET, addr, b) == 1)
        c.bytes.assign(b, b + 4);
    else if (inet_pton(AF_INET6, addr, b) == 1)
        c.bytes.assign(b, b + 16);
    else
        std::abort();
    return c;
}

const std::vector<cidr>& trusted() {
    static const std::vector<cidr> blocks{block("127.0.0.1", 32), block("10.0.0.0", 8),
                                          block("::1", 128), block("2001:db8::", 32),
                                          block("::ffff:192.168.0.0", 112)};
    return blocks;
}

// Canonical text: what canonical_ip returns for it is itself, in address characters only.
void require_canonical(const std::string& s) {
    require(!s.empty() && s.size() <= 39);
    require(s.find_first_not_of("0123456789abcdef.:") == std::string::npos);
    auto again = id::canonical_ip(s);
    require(again && *again == s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string_view> lines;
    for (auto nl = in.find('\n'); nl != std::string_view::npos; nl = in.find('\n')) {
        lines.push_back(in.substr(0, nl));
        in.remove_prefix(nl + 1);
    }
    lines.push_back(in);

    for (auto line : lines)
        if (auto c = id::canonical_ip(line)) {
            require_canonical(*c);
            for (const auto& b : trusted())
                require(id::in_cidr(line, b) == id::in_cidr(*c, b));
        }

    auto peer = lines.front();
    std::vector<std::string_view> fields(lines.begin() + 1, lines.end());
    auto peer_canonical = id::canonical_ip(peer);
    bool peer_trusted = id::is_trusted(peer, trusted());

    // Every address X-Forwarded-For could yield: the peer and each comma-separated entry.
    std::vector<std::string> possible;
    if (peer_canonical) possible.push_back(*peer_canonical);
    for (auto line : fields)
        for (auto rest = line;;) {
            auto comma = rest.find(',');
            if (auto c = id::canonical_ip(rest.substr(0, comma))) possible.push_back(*c);
            if (comma == std::string_view::npos) break;
            rest.remove_prefix(comma + 1);
        }

    for (unsigned hops : {0u, 2u})
        for (auto kind : {id::header_kind::x_forwarded_for, id::header_kind::forwarded,
                          id::header_kind::single}) {
            id::settings s{kind, &trusted(), hops};
            auto client = id::resolve_client_ip(peer, fields, s);
            if (!peer_canonical) {
                require(client.empty());
                continue;
            }
            require_canonical(client);
            require(client != "0.0.0.0" && client != "::");
            if ((!peer_trusted && hops == 0) || fields.empty()) require(client == *peer_canonical);
            if (kind == id::header_kind::x_forwarded_for) {
                bool found = false;
                for (const auto& p : possible)
                    found = found || p == client;
                require(found);
            }
        }
    return 0;
}
