#include "gateway/http/grpc_status.hpp"

namespace rategate::gateway {

int grpc_status_for(unsigned http_status, bool limited) {
    if (limited) return 8;
    switch (http_status) {
        case 413:
            return 8;  // RESOURCE_EXHAUSTED
        case 401:
            return 16;  // UNAUTHENTICATED
        case 403:
            return 7;  // PERMISSION_DENIED
        case 404:
        case 405:
            return 12;  // UNIMPLEMENTED
        case 400:
        case 431:
            return 3;  // INVALID_ARGUMENT
        case 502:
        case 503:
            return 14;  // UNAVAILABLE
        case 504:
            return 4;  // DEADLINE_EXCEEDED
        default:
            return 2;  // UNKNOWN
    }
}

std::string grpc_percent_encode(std::string_view message) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(message.size());
    for (unsigned char c : message) {
        if (c >= 0x20 && c <= 0x7e && c != '%') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

}  // namespace rategate::gateway
