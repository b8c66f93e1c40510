// Boost.URL is built header-only in Boost 1.81 (Debian ships no compiled library): this is its one
// TU.
#include <boost/url/src.hpp>
