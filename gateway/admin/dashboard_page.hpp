// The dashboard page of admin `GET /` (SPEC §4): gateway/admin/dashboard.html, embedded at build
// time (gateway/admin/embed_page.cmake). Self-contained: HTML, CSS and script, no CDN.
#pragma once

#include <string_view>

namespace rategate::gateway::admin {

/// The page's HTML text.
std::string_view dashboard_page();

}  // namespace rategate::gateway::admin
