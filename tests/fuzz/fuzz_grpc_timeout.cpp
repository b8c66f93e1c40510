// libFuzzer harness: gateway/http/grpc_timeout.cpp, the `grpc-timeout` a gRPC client sends.
// Invariants: no crash or overflow (UBSan); a value parse_timeout accepts is never negative;
// what format_timeout writes parses again and never names more time than it was given.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gateway/http/grpc_timeout.hpp"

namespace grpc = rategate::gateway::grpc;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    auto t = grpc::parse_timeout(in);
    if (!t) return 0;
    if (t->count() < 0) std::abort();
    auto text = grpc::format_timeout(*t);
    auto again = grpc::parse_timeout(text);
    if (!again || *again > *t) std::abort();
    return 0;
}
