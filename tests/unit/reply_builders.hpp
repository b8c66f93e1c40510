// Hand-built Redis replies for table tests of the sans-I/O reply parsers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "limiters/redis/reply.hpp"

namespace rategate::limiters::redis::test {

inline reply bulk(std::string s) {
    reply r;
    r.type = reply::kind::string;
    r.str = std::move(s);
    return r;
}
inline reply integer(std::int64_t v) {
    reply r;
    r.type = reply::kind::integer;
    r.integer = v;
    return r;
}
inline reply array(std::vector<reply> e) {
    reply r;
    r.type = reply::kind::array;
    r.elements = std::move(e);
    return r;
}
inline reply error(std::string s) {
    reply r;
    r.type = reply::kind::error;
    r.str = std::move(s);
    return r;
}
inline reply status(std::string s) {
    reply r;
    r.type = reply::kind::status;
    r.str = std::move(s);
    return r;
}

}  // namespace rategate::limiters::redis::test
