// Strict, sans-I/O checks of a raw HTTP/1.1 request header block (SPEC §3 "Strict parsing").
// Beast's parser is lenient about several request-smuggling vectors; this runs first.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rategate::gateway {

/// Where the end of a header block is, as bytes arrive.
struct header_end {
    enum class state { incomplete, complete, malformed } status = state::incomplete;
    std::size_t length = 0;  ///< bytes of the block including the final CRLFCRLF (when complete)
    std::size_t resume = 0;  ///< offset to resume searching from on the next call
    const char* reason = "";
};

/// Looks for CRLFCRLF in `data`, starting at `from` (a previous result's `resume`).
/// A bare LF is reported as malformed at once, so a client cannot stall on "\n\n".
header_end find_header_end(std::string_view data, std::size_t from);

/// Validates a complete header block (request line + fields + CRLFCRLF).
/// Returns an empty string when acceptable, else a short reason for the 400:
/// an empty request line, bare CR or LF, NUL, obs-fold, whitespace before a colon, both
/// Content-Length and Transfer-Encoding, an invalid or repeated Content-Length, a repeated or
/// invalid Transfer-Encoding (check_transfer_encoding).
std::string check_header_block(std::string_view block);

/// Checks a request's Transfer-Encoding value (RFC 9112 §6.1): a comma-separated list of
/// transfer codings, each a bare token (no parameters, no empty element), with `chunked` (any
/// case) exactly once and last. Returns an empty string when acceptable, else the reason for
/// the 400. Anything looser would let the gateway and Beast's parser (which looks for the first
/// `chunked` token) disagree on where the body ends: request smuggling.
std::string check_transfer_encoding(std::string_view value);

}  // namespace rategate::gateway
