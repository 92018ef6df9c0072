// The native API's routes of the server itself: the dashboard's page,
// health and readiness (GET, and HEAD for checkers that send it: the
// transport leaves the body out), the API's description, /metrics and the
// overview.

#include <fmt/format.h>

#include <memory>
#include <string>

#include "server/api_call.h"
#include "server/body.h"
#include "server/dashboard.h"

namespace sqlq::server {

// docs/openapi.json, compiled in by cmake/embed_text.cmake.
extern const std::string_view kOpenApiJson;

namespace api {
namespace {

// The page holds no data: it fetches everything with the user's token.
Outcome Dashboard(Call&) {
  Reply r;
  r.text = std::string(DashboardHtml());
  r.content_type = "text/html; charset=utf-8";
  r.headers = DashboardHeaders();
  return Answer(std::move(r));
}

Outcome Healthz(Call&) { return Answer(200, {{"status", "ok"}}); }

Outcome Readyz(Call& c) {
  if (c.api.gauges.shutting_down()) {
    Throw(503, "shutting_down", "the server is shutting down");
  }
  // Ready means writes commit (a full disk still reads fine): a write that
  // changes nothing, at most once a second however often the load balancer
  // asks.
  Check(c.api.CheckWritable());
  return Answer(200, {{"status", "ready"}});
}

// The OpenAPI description of this API: a public document, like the page.
Outcome OpenApi(Call&) {
  Reply r;
  r.text = std::string(kOpenApiJson);
  return Answer(std::move(r));
}

// With a token of its own, unless --metrics-public.
Outcome MetricsText(Call& c) {
  const std::shared_ptr<const TokenEntry> reader =
      c.api.metrics_public ? nullptr : c.api.Authenticate(c.req);
  if (reader != nullptr && !Auth::ReadsMetrics(*reader)) {
    Throw(403, "forbidden",
          "reading /metrics needs a token with the 'metrics' or 'admin' "
          "permission");
  }
  // A token sees what it has a grant on (metrics:* sees all); what was
  // dropped meanwhile is left out.
  auto visible = [&](const std::string& name) {
    return reader == nullptr || Auth::Sees(*reader, name);
  };
  // The store as it is now (the reading the dashboard shares).
  const std::shared_ptr<const Picture> picture = Take(c.api.overview.Read());
  Metrics::Figures figures;
  figures.waiting = picture->figures.waiting;  // shown for the queues
  for (const QueueStats& s : picture->figures.queues) {
    if (visible(s.name)) figures.queues.push_back(s);
  }
  for (const RingStats& s : picture->figures.rings) {
    if (visible(s.name)) figures.rings.push_back(s);
  }
  for (const RotationStats& s : picture->figures.rotations) {
    if (visible(s.name)) figures.rotations.push_back(s);
  }
  Reply r;
  r.text = c.api.metrics.Render(figures, c.api.gauges.read());
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return Answer(std::move(r));
}

Outcome OverviewOf(Call& c) {
  Body b(c.req.body, {});
  return Answer(200, OverviewJson(*Take(c.api.overview.Latest()), c.who.get(),
                                  c.api.gauges.read));
}

constexpr Route kRoutes[] = {
    {"GET", "/dashboard", Access::kNone, Dashboard, false, false},
    {"GET", "/healthz", Access::kNone, Healthz},
    {"HEAD", "/healthz", Access::kNone, Healthz},
    {"GET", "/readyz", Access::kNone, Readyz},
    {"HEAD", "/readyz", Access::kNone, Readyz},
    {"GET", "/openapi.json", Access::kNone, OpenApi},
    {"GET", "/metrics", Access::kMetrics, MetricsText},
    {"GET", "/v1/overview", Access::kToken, OverviewOf},
};

}  // namespace

std::span<const Route> AdminRoutes() { return kRoutes; }

}  // namespace api
}  // namespace sqlq::server
