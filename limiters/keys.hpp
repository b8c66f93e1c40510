// Key schema of limiter state (README "Key schema"); <limiter> is the limiter's escaped name
// followed by "~" and its shape (shape_tag: algorithm and rules), so a limiter whose algorithm
// or rules change starts fresh keys instead of meeting state of another type (SPEC §5):
//   <key_prefix>{<limiter>}                      scope global
//   <key_prefix>{<limiter>|r=<route>}            scope route, and per_route user/ip
//   <key_prefix>{<limiter>|u=<user id>}          scope user   (…|r=<route> with per_route)
//   <key_prefix>{<limiter>|ip=<address>}         scope ip     (…|r=<route> with per_route)
//   <key_prefix>{<limiter>|h=<header value>}     scope header:NAME
// Every name and value is percent-escaped (all bytes but A-Z a-z 0-9 . _ -), so a value with
// ':', '{', '}', '|', '%', a newline or non-UTF-8 bytes can neither collide with another key nor
// choose a Redis Cluster hash slot: the braces are the hash tag, one slot per layer key.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace rategate::limiters {

/// Percent-escapes every byte outside [A-Za-z0-9._-].
std::string escape_key_part(std::string_view value);

/// Appends `value` percent-escaped (as escape_key_part) to `out`.
void append_escaped(std::string& out, std::string_view value);

/// The constant start of every key of a limiter: `<prefix>{<escaped limiter>~<shape>`; a key is
/// this, then `|<parts>` when there are parts, then `}` (see layer_key).
std::string key_head(std::string_view prefix, std::string_view limiter, std::string_view shape);

/// Builds a layer key. `parts` are already escaped "x=value" pieces joined by '|'; `shape`
/// (shape_tag(), may be empty) follows the escaped limiter name after a '~' (which escaping
/// never leaves in a name, so no two limiters' keys can meet).
std::string layer_key(std::string_view prefix, std::string_view limiter, std::string_view parts,
                      std::string_view shape = {});

/// Eight hex digits naming a layer's state shape: FNV-1a (64-bit, folded to 32) over the
/// algorithm code, every rule's four numbers and, for a layer that reserves (an enforced
/// layer with a delay: its state may hold a debt of reserved permits), one more byte. The
/// delay's length, the mode otherwise and on_missing_key are not part of it. A state without
/// debt is what the over-limit cache's retry bounds assume, so a layer that stops reserving
/// starts fresh keys rather than carrying debt into a shape that has none.
std::string shape_tag(int algorithm_code, const std::vector<std::array<double, 4>>& rules,
                      bool reserving = false);

}  // namespace rategate::limiters
