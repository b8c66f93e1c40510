// Key schema of limiter state (README "Key schema"):
//   <key_prefix>{<limiter>}                      scope global
//   <key_prefix>{<limiter>|r=<route>}            scope route, and per_route user/ip
//   <key_prefix>{<limiter>|u=<user id>}          scope user   (…|r=<route> with per_route)
//   <key_prefix>{<limiter>|ip=<address>}         scope ip     (…|r=<route> with per_route)
//   <key_prefix>{<limiter>|h=<header value>}     scope header:NAME
// Every name and value is percent-escaped (all bytes but A-Z a-z 0-9 . _ -), so a value with
// ':', '{', '}', '|', '%', a newline or non-UTF-8 bytes can neither collide with another key nor
// choose a Redis Cluster hash slot: the braces are the hash tag, one slot per layer key.
#pragma once

#include <string>
#include <string_view>

namespace rategate::limiters {

/// Percent-escapes every byte outside [A-Za-z0-9._-].
std::string escape_key_part(std::string_view value);

/// Builds a layer key. `parts` are already escaped "x=value" pieces joined by '|'.
std::string layer_key(std::string_view prefix, std::string_view limiter, std::string_view parts);

}  // namespace rategate::limiters
