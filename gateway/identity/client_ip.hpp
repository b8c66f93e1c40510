// The client address of a request (SPEC §2 "Client identity"), sans-I/O: parsing one address
// as forwarding headers and peers write it, canonical text (RFC 5952 for IPv6, IPv4-mapped
// addresses as IPv4), CIDR membership, and the right-to-left walk over X-Forwarded-For,
// Forwarded (RFC 7239) or a one-address header such as X-Real-IP behind trusted proxies.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace rategate::gateway::identity {

/// One address as it appears in a forwarding header or as a peer, in canonical text, or nullopt
/// when `text` is not an IP address (`unknown`, an obfuscated RFC 7239 node such as `_hidden`,
/// `999.1.1.1`, `1.2.3`, empty, junk) or is the unspecified address (`0.0.0.0`, `::`, which
/// name no client: RFC 1122 §3.2.1.3, RFC 4291 §2.5.2).
/// Accepted around the address: surrounding spaces/tabs and one pair of double quotes;
/// `[v6]` and `[v6]:port` (RFC 3986 IP-literal, port digits or an RFC 7239 obfuscated port);
/// `v4:port`; an IPv6 zone id (`%eth0`, or `%25eth0` as in RFC 6874), which is dropped.
/// IPv4 must be strict dotted decimal (four decimal octets, no leading zeros). The result is
/// IPv4 dotted decimal, or IPv6 per RFC 5952 §4 (lower case, no leading zeros, the longest run
/// of two or more zero groups compressed, the first one on a tie); an IPv4-mapped IPv6 address
/// (`::ffff:0:0/96`, any notation) is returned as its IPv4 address. Idempotent:
/// canonical_ip(*canonical_ip(x)) == canonical_ip(x).
std::optional<std::string> canonical_ip(std::string_view text);

/// Whether `ip` (any text canonical_ip accepts) lies in `block`. Compared on the canonical
/// bytes: an IPv4-mapped address matches IPv4 blocks, and a block written as IPv4-mapped
/// (`::ffff:10.0.0.0/104`) matches the IPv4 addresses it covers. Not an address: false.
bool in_cidr(std::string_view ip, const config::cidr& block);

/// Whether `ip` lies in any of `blocks` (see in_cidr).
bool is_trusted(std::string_view ip, const std::vector<config::cidr>& blocks);

/// Which forwarding header carries the client address (config `identity.client_ip.header`).
enum class header_kind {
    x_forwarded_for,  ///< `X-Forwarded-For`: a comma list of addresses, client first
    forwarded,        ///< `Forwarded` (RFC 7239): elements `for=...;by=...`, comma separated
    single,           ///< any other name, e.g. `X-Real-IP`: exactly one address
};

/// The kind of header `name` is (ASCII case-insensitive).
header_kind kind_of(std::string_view name);

/// What resolve_client_ip needs from the config: the header kind and who is trusted.
/// `trusted_proxies` must outlive the settings (it usually points into the loaded config).
struct settings {
    header_kind header = header_kind::x_forwarded_for;
    const std::vector<config::cidr>* trusted_proxies = nullptr;  ///< null: no block trusted
    /// Hops trusted by position: the peer and the `trusted_hops − 1` right-most entries,
    /// whatever their addresses (0: none). A hop is trusted when either rule says so.
    unsigned trusted_hops = 0;

    /// The settings of `identity` (`client_ip_header`, `trusted_proxies`, `trusted_hops`).
    static settings from(const config::identity_config& identity);

    /// Whether any hop can be trusted: without one, the client is always the peer.
    bool trusts_any() const {
        return trusted_hops > 0 || (trusted_proxies && !trusted_proxies->empty());
    }
};

/// The client address of a request, in canonical text (see canonical_ip), or "" when even the
/// peer is not an address. `peer` is the TCP peer; `field_lines` are the values of ALL field
/// lines of the configured header, in the order received (RFC 9110 §5.3: together they are one
/// comma list; for a `single` header, more than one line is not an address).
/// The rule (SPEC §2): an untrusted peer is the client and the header is ignored. Otherwise the
/// list is walked from the right, skipping trusted hops (by block or by position, see
/// settings); the first untrusted address is the client. An entry that is not an address
/// (`unknown`, garbage, an RFC 7239 obfuscated node or an element without `for`) stops the walk and
/// the client is the trusted hop that passed it on. When every entry is trusted, the left-most is
/// the client. Empty list elements are ignored (RFC 9110 §5.6.1). A `Forwarded` element outside RFC
/// 7239 §4's grammar (a parameter name that is not a token, whitespace around `=`, an unquoted
/// value that is not a token such as an IPv6 address or a port, a repeated parameter) is not an
/// address. Lists are split at every ',' (and Forwarded pairs at every ';'), quotes or not: no RFC
/// 7239 value may hold them, and a client's unbalanced quote must not hide the entries a proxy
/// appends to the same line.
std::string resolve_client_ip(std::string_view peer,
                              const std::vector<std::string_view>& field_lines, const settings& s);

}  // namespace rategate::gateway::identity
