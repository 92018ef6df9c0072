// The native API's dispatcher: a request matched to its route in the
// table (api_call.h), authenticated, checked against the route's
// permission and labelled; then the route's endpoint answers it.

#include "server/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/api_call.h"
#include "server/target.h"

namespace sqlq::server {
namespace api {
namespace {

using Clock = std::chrono::steady_clock;

// The token of an Authorization header, or the 401 reply. The scheme is
// case-insensitive (RFC 9110); one or more spaces follow it.
std::string BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer";
  if (header.empty()) {
    Throw(401, "unauthorized",
          "this server requires 'Authorization: Bearer TOKEN'");
  }
  bool scheme =
      header.size() > kScheme.size() &&
      (header[kScheme.size()] == ' ' || header[kScheme.size()] == '\t');
  for (std::size_t i = 0; scheme && i < kScheme.size(); ++i) {
    scheme = std::tolower(static_cast<unsigned char>(header[i])) == kScheme[i];
  }
  std::string_view token = scheme ? header.substr(kScheme.size()) : "";
  while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) {
    token.remove_prefix(1);
  }
  if (token.empty()) {
    Throw(401, "unauthorized",
          "the Authorization header must be 'Bearer TOKEN'");
  }
  return std::string(token);
}

// Whether a template's segment is a {parameter}, and whether it is `key`'s.
bool IsParam(std::string_view seg) {
  return seg.size() > 2 && seg.front() == '{' && seg.back() == '}';
}
bool IsParam(std::string_view seg, std::string_view key) {
  return IsParam(seg) && seg.substr(1, seg.size() - 2) == key;
}

// The parameters that are integers, and what a segment that is none is not.
constexpr std::pair<std::string_view, std::string_view> kNumbers[] = {
    {"{id}", "a message id"}, {"{seq}", "an entry's seq"}};

bool IsNumber(std::string_view text, std::int64_t* out = nullptr) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (out != nullptr) *out = v;
  return ec == std::errc() && end == text.data() + text.size();
}

// The routes of one path template, in table order.
struct Path {
  std::vector<std::string_view> segments;
  std::vector<const Route*> routes;
  std::vector<std::string> labels;  // "METHOD /path", of each route
  // Which of two templates that match a path wins: the one with a literal
  // where the other has a parameter, at the first segment they differ
  // ("/messages/count" over "/messages/{id}").
  std::uint64_t rank = 0;
};

std::vector<Path> BuildPaths() {
  std::vector<Path> paths;
  for (auto area : {AdminRoutes, QueueRoutes, MessageRoutes, ObjectRoutes,
                    TopicRoutes, BatchRoutes}) {
    for (const Route& r : area()) {
      auto it = std::find_if(paths.begin(), paths.end(), [&](const Path& p) {
        return p.routes.front()->path == r.path;
      });
      if (it == paths.end()) {
        Path p;
        std::string_view rest = r.path.substr(1);
        for (std::size_t i = 0; !rest.empty(); ++i) {
          const std::size_t slash = rest.find('/');
          p.segments.push_back(rest.substr(0, slash));
          if (!IsParam(p.segments.back())) p.rank |= 1ull << (63 - i);
          rest = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
        }
        it = paths.insert(paths.end(), std::move(p));
      }
      it->routes.push_back(&r);
      it->labels.push_back(fmt::format("{} {}", r.method, r.path));
    }
  }
  return paths;
}

const std::vector<Path>& Paths() {
  static const std::vector<Path> paths = BuildPaths();
  return paths;
}

// The path template `segments` match, or nullptr.
const Path* FindPath(const std::vector<std::string>& segments) {
  const Path* best = nullptr;
  for (const Path& p : Paths()) {
    if (p.segments.size() != segments.size()) continue;
    bool match = true;
    for (std::size_t i = 0; match && i < segments.size(); ++i) {
      match = IsParam(p.segments[i]) || p.segments[i] == segments[i];
    }
    if (match && (best == nullptr || p.rank > best->rank)) best = &p;
  }
  return best;
}

[[noreturn]] void NoRoute(const Request& req, std::string_view why = {}) {
  Throw(404, "no_route",
        fmt::format("no endpoint at {} {}{}", req.method,
                    req.target.substr(0, req.target.find('?')), why));
}

// Handles `req`: its route found, its token checked, its endpoint run.
// Sets `route` to the route's label once the path is known.
Outcome Dispatch(State& api, const Request& req, std::string& route,
                 Lookup& lookup) {
  const Target t = ParseTarget(req.target);
  // The page is at / too.
  static const std::vector<std::string> kPage = {"dashboard"};
  const std::vector<std::string>& seg = t.segments.empty() ? kPage : t.segments;
  // Under /v1, the token first: without one, a client learns nothing of
  // which routes there are.
  const bool v1 = seg[0] == "v1";
  if (v1 && seg.size() < 2) NoRoute(req);
  std::string token;
  std::shared_ptr<const TokenEntry> who;
  if (v1) who = api.Authenticate(req, &token);

  const Path* path = FindPath(seg);
  if (path == nullptr) NoRoute(req);
  for (std::size_t i = 0; i < seg.size(); ++i) {
    for (const auto& [param, what] : kNumbers) {
      if (path->segments[i] == param && !IsNumber(seg[i])) {
        NoRoute(req,
                fmt::format(": '{}' is not {}", seg[i].substr(0, 64), what));
      }
    }
  }
  std::size_t i = 0;
  while (i < path->routes.size() && path->routes[i]->method != req.method) ++i;
  if (i == path->routes.size()) {
    // Counted under the path's last route.
    route = path->labels.back();
    std::string allowed;
    for (const Route* r : path->routes) {
      allowed += fmt::format("{}{}", allowed.empty() ? "" : ", ", r->method);
    }
    Throw(405, "method_not_allowed",
          fmt::format("{} is not allowed here; use {}", req.method, allowed));
  }
  const Route& r = *path->routes[i];
  route = path->labels[i];
  Call call(api, req, t, r, path->segments, std::move(who), std::move(token),
            lookup);
  if (!r.own_check) {
    switch (r.access) {
      case Access::kAny:
        call.See(call.name());
        break;
      case Access::kSend:
        call.Need(kSend, call.name());
        break;
      case Access::kClaim:
        call.Need(kClaim, call.name());
        break;
      case Access::kAdmin:
        call.Need(kAdmin, call.name());
        break;
      case Access::kNone:     // public
      case Access::kMetrics:  // the endpoint checks its token
      case Access::kToken:    // authenticated above
        break;
    }
  }
  return r.handle(call);
}

}  // namespace

std::string_view AccessName(Access access) {
  // In the order of Access.
  static constexpr std::string_view kNames[] = {
      "none", "metrics", "token", "any", "send", "claim", "admin"};
  return kNames[static_cast<std::size_t>(access)];
}

State::Own::Own(Store& store, const Limits& limits)
    : auth_failures(limits.auth_failure_burst,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        limits.auth_failure_refill)),
      queues(store) {}

State::State(Store& the_store, const Limits& the_limits, const Auth& the_auth,
             Metrics& the_metrics, Api::ServerGauges the_gauges,
             bool public_metrics, Overview::Options overview_options,
             std::optional<Api::Shared> shared)
    : store(the_store),
      limits(the_limits),
      auth(the_auth),
      own(shared ? nullptr : std::make_unique<Own>(the_store, the_limits)),
      auth_failures(shared ? shared->auth_failures : own->auth_failures),
      queues(shared ? shared->queues : own->queues),
      overview(the_store, std::move(overview_options)),
      metrics(the_metrics),
      gauges(std::move(the_gauges)),
      metrics_public(public_metrics) {}

std::shared_ptr<const TokenEntry> State::Authenticate(const Request& req,
                                                      std::string* token) {
  if (!auth.enabled()) return nullptr;
  // An address that failed too often is refused before its token is looked
  // at: a guess gets no answer, right or wrong.
  if (const auto wait = auth_failures.Blocked(req.peer); wait.count() > 0) {
    const auto seconds = (wait.count() + 999) / 1000;
    throw HttpError{
        429,
        "too_many_auth_failures",
        fmt::format("too many failed authentications from this address; "
                    "retry in {} s",
                    seconds),
        {{"Retry-After", std::to_string(seconds)}}};
  }
  std::string presented = BearerToken(req.authorization);
  auto who = auth.Find(presented);
  if (who == nullptr) {
    // Asking without a token is no guess; a wrong token is.
    if (!req.authorization.empty()) auth_failures.Failed(req.peer, "token");
    Throw(401, "unauthorized", "unknown token");
  }
  if (token != nullptr) *token = std::move(presented);
  return who;
}

Status State::CheckWritable() {
  std::lock_guard<std::mutex> lock(ready_mu_);
  const auto now = Clock::now();
  if (now - ready_checked_ >= std::chrono::seconds(1)) {
    ready_ = store.CheckWritable();
    ready_checked_ = now;
  }
  return ready_;
}

const std::string& Call::Param(std::string_view key) const {
  for (std::size_t i = 0; i < path_.size(); ++i) {
    if (IsParam(path_[i], key)) return target.segments[i];
  }
  // A route whose endpoint asks for what its template lacks: a bug.
  Throw(500, "internal",
        fmt::format("route {} has no parameter {}", route_.path, key));
}

std::int64_t Call::Number(std::string_view key) const {
  std::int64_t v = 0;
  IsNumber(Param(key), &v);  // checked by the dispatcher
  return v;
}

WorkQueue Call::Queue() {
  lookup_.cached = name();
  return Take(api.queues.Get(lookup_.cached, lookup_.hit));
}

void Call::Need(unsigned perm, const std::string& name) const {
  if (who == nullptr || Auth::Allows(*who, perm, name)) return;
  const char* what = perm == kSend    ? "send"
                     : perm == kClaim ? "claim"
                                      : "admin";
  Throw(
      403, "forbidden",
      fmt::format("this token lacks the '{}' permission on '{}'", what, name));
}

void Call::See(const std::string& name) const {
  if (Visible(name)) return;
  Throw(403, "forbidden",
        fmt::format("this token has no permission on '{}'", name));
}

}  // namespace api

Api::Api(Store& store, const Limits& limits, const Auth& auth, Metrics& metrics,
         ServerGauges gauges, bool metrics_public, Overview::Options overview,
         std::optional<Shared> shared)
    : state_(std::make_unique<api::State>(store, limits, auth, metrics,
                                          std::move(gauges), metrics_public,
                                          std::move(overview), shared)) {}

Api::~Api() = default;

Overview& Api::overview() { return state_->overview; }

std::vector<Api::RouteInfo> Api::Routes() {
  std::vector<RouteInfo> out;
  for (const api::Path& p : api::Paths()) {
    for (const api::Route* r : p.routes) {
      out.push_back(
          {r->method, r->path, api::AccessName(r->access), r->described});
    }
  }
  return out;
}

Outcome Api::Handle(const Request& req) {
  std::string route = "unmatched";
  Outcome out;
  for (int attempt = 0;; ++attempt) {
    api::Lookup lookup;
    try {
      out = api::Dispatch(*state_, req, route, lookup);
      break;
    } catch (const HttpError& e) {
      if (e.status == 404 && !lookup.cached.empty()) {
        // The queue may have been dropped (and made again) elsewhere: a
        // handle from the cache is refreshed and the request made once
        // more. A 404 leaves nothing done, so the retry is safe.
        state_->queues.Forget(lookup.cached);
        if (lookup.hit && attempt == 0) continue;
      }
      out = Outcome{ErrorReply(e.status, e.code, e.message), std::nullopt};
      out.reply.headers = e.headers;
      break;
    }
  }
  out.reply.route = std::move(route);
  return out;
}

}  // namespace sqlq::server
