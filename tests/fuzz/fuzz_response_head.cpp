// libFuzzer harness for gateway/http/response_head: an upstream's response head parsed in
// place. Views stay inside the input; a complete head ends in CRLFCRLF with token names and
// clean values; a head is complete or malformed the same way whatever follows it (bytes past
// it, or the rest of a head cut short), so reading it in pieces never changes the verdict.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gateway/http/response_head.hpp"
#include "gateway/http/text.hpp"

using namespace rategate::gateway;
using state = h1::head_parse::state;

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

bool inside(std::string_view part, std::string_view whole) {
    return part.empty() || (part.data() >= whole.data() &&
                            part.data() + part.size() <= whole.data() + whole.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    constexpr std::size_t max_bytes = 4096;
    h1::response_head head;
    auto whole = h1::parse_response_head(in, max_bytes, head);
    if (whole.status == state::complete) {
        require(head.length >= 4 && head.length <= in.size() && head.length <= max_bytes);
        require(in.substr(head.length - 4, 4) == "\r\n\r\n");
        require(head.status >= 100 && head.status <= 999);
        require(head.version == 10 || head.version == 11);
        require(inside(head.reason, in.substr(0, head.length)));
        for (const auto& f : head.fields) {
            require(inside(f.name, in) && inside(f.value, in));
            require(!f.name.empty());
            for (char c : f.name)
                require(h1::is_tchar(c));
            require(f.value == h1::trim(f.value));
            for (unsigned char c : f.value)
                require(c >= 0x20 || c == '\t');
        }
        // The same head with bytes after it, and every cut inside it.
        std::string longer(in);
        longer += "HTTP/1.1 200 OK\r\n\r\n";
        h1::response_head again;
        auto more = h1::parse_response_head(longer, max_bytes, again);
        require(more.status == state::complete && again.length == head.length &&
                again.fields.size() == head.fields.size() && again.status == head.status);
        for (std::size_t cut = 0; cut < head.length; cut += 1 + head.length / 16)
            require(h1::parse_response_head(in.substr(0, cut), max_bytes, again).status ==
                    state::incomplete);
    } else if (whole.status == state::malformed) {
        // Malformed stays malformed with more bytes: a slow upstream cannot turn it around.
        std::string longer(in);
        longer += "\r\n\r\n";
        h1::response_head again;
        require(h1::parse_response_head(longer, max_bytes, again).status == state::malformed);
    } else if (whole.status == state::incomplete) {
        require(in.size() < max_bytes);
    }
    return 0;
}
