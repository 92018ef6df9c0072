// The web dashboard: one static HTML page (with its script and style inline)
// compiled into the binary and served at GET / and GET /dashboard. It holds
// no data: the browser fetches everything from the JSON API with the token
// the user types in (kept in sessionStorage), so the page itself needs no
// authentication. docs/http-api.md, "Dashboard", says what it shows.

#ifndef SQLQ_SERVER_DASHBOARD_H_
#define SQLQ_SERVER_DASHBOARD_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sqlq::server {

std::string_view DashboardHtml();

// The headers the page is served with: a Content-Security-Policy allowing
// only its own inline script and style (by hash) and requests to this
// server, and no framing (X-Frame-Options, frame-ancestors).
const std::vector<std::pair<std::string, std::string>>& DashboardHeaders();

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_DASHBOARD_H_
