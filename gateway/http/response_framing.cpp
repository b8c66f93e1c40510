#include "gateway/http/response_framing.hpp"

namespace rategate::gateway::h1 {

response_framing frame_response(const framing_input& in) {
    response_framing out;
    out.keep_alive = in.client_keep_alive;
    if (in.head_request || in.status / 100 == 1 || in.status == 204 || in.status == 304) {
        out.body = body_framing::none;
    } else if (in.has_content_length && !in.chunked) {
        out.body = body_framing::sized;
    } else if (in.client_version >= 11) {
        out.body = body_framing::chunked;
    } else {
        out.body = body_framing::close_delimited;
        out.keep_alive = false;
    }
    return out;
}

bool upstream_reusable(const upstream_response_facts& r) {
    if (!r.keep_alive) return false;
    const bool announced_body =
        r.transfer_encoding || (r.has_content_length && r.content_length > 0);
    if (r.bodiless) return !announced_body;
    const bool sized = r.has_content_length && !r.transfer_encoding;
    return sized || r.chunked;
}

}  // namespace rategate::gateway::h1
