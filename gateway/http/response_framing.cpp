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

}  // namespace rategate::gateway::h1
