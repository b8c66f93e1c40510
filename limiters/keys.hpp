// Key schema of limiter state (README "Key schema"); <limiter> is the limiter's escaped name
// followed by "~" and its shape (shape_tag: algorithm and rules), so a limiter whose algorithm
// or rules change starts fresh keys instead of meeting state of another type (SPEC §5):
//   <key_prefix>{<limiter>}                      scope global
//   <key_prefix><limiter>|{r=<route>}            scope route
//   <key_prefix><limiter>|{u=<user id>}          scope user   (|{u=<user id>|r=<route>} with
//   per_route) <key_prefix><limiter>|{ip=<address>}         scope ip     (…|r=<route>} with
//   per_route) <key_prefix><limiter>|{h=<header value>}     scope header:NAME
// The braces are the Redis Cluster hash tag: a global limiter's counter is its own slot, and a
// scoped counter's slot is its identity's, so every layer of one user (of one address, one
// route...) shares one slot and is decided in one atomic part of a split chain. Every name and
// value is percent-escaped (all bytes but A-Z a-z 0-9 . _ -), so a value with ':', '{', '}',
// '|', '%', a newline or non-UTF-8 bytes can neither collide with another key nor choose a
// slot of its own; a key_prefix holding braces is refused with a cluster (config).
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

/// The constant start of every scoped key of a limiter: `<prefix><escaped limiter>~<shape>`; a
/// scoped key is this, then `|{<parts>}` (see layer_key).
std::string key_head(std::string_view prefix, std::string_view limiter, std::string_view shape);

/// The key of a global limiter from its key_head(): `<prefix>{<escaped limiter>~<shape>}`.
std::string global_key(std::string_view prefix, std::string_view head);

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
/// starts fresh keys rather than carrying debt into a shape that has none. A `layout` other
/// than 0 (algorithm_row::layout: the state's numbers changed meaning) is mixed in last, so
/// such an algorithm's keys are new ones; with 0 the tag is what it always was.
std::string shape_tag(int algorithm_code, const std::vector<std::array<double, 4>>& rules,
                      bool reserving = false, int layout = 0);

}  // namespace rategate::limiters
