#include "server/overview.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "core/periodic_thread.h"
#include "server/log.h"
#include "wire/json.h"

namespace sqlq::server {

namespace {

using SteadyClock = std::chrono::steady_clock;

std::array<std::int64_t, 4> CountersOf(const QueueStats& s) {
  return {s.sends, s.claims, s.acks, s.dead_lettered};
}

// Per second from `before` to `after` over `seconds`; a counter that went
// back (the queue was dropped and made again) counts from 0.
Rates RatesBetween(const std::array<std::int64_t, 4>& before,
                   const std::array<std::int64_t, 4>& after, double seconds) {
  Rates r{};
  if (seconds <= 0) return r;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const std::int64_t d =
        after[i] >= before[i] ? after[i] - before[i] : after[i];
    r[i] = static_cast<double>(d) / seconds;
  }
  return r;
}

double Seconds(SteadyClock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The stats of each of `listed` (a list of rings or rotations) into
// `out`; one dropped since the list, or that cannot be read now, is left
// out.
template <class Info, class Get, class Stats>
Status AddStats(Result<std::vector<Info>> listed, Get get,
                std::vector<Stats>& out) {
  if (!listed.ok()) return listed.status();
  for (const Info& info : *listed) {
    auto handle = get(info);
    auto s = handle.ok() ? handle->Stats() : handle.status();
    if (s.ok()) out.push_back(std::move(*s));
  }
  return Status::Ok();
}

}  // namespace

Overview::Overview(Store& store, Options options)
    : store_(store), options_(std::move(options)) {}

Overview::~Overview() { sampler_.reset(); }

Result<std::shared_ptr<const Picture>> Overview::Take() {
  auto p = std::make_shared<Picture>();
  p->taken = options_.now();
  p->at = std::chrono::time_point_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now());
  auto queues = store_.ListQueues();
  if (!queues.ok()) return queues.status();
  for (QueueInfo& info : *queues) {
    // A queue dropped since the list is left out.
    // One that cannot be read now is left out too: the others are shown.
    auto q = store_.Queue(info.name);
    auto s = q.ok() ? q->Stats() : q.status();
    if (!s.ok()) continue;
    p->figures.queues.push_back(std::move(*s));
    p->infos.push_back(std::move(info));
  }
  Status s = AddStats(
      store_.ListRings(),
      [&](const RingInfo& i) { return store_.GetRing(i.name); },
      p->figures.rings);
  if (!s.ok()) return s;
  s = AddStats(
      store_.ListRotations(),
      [&](const RotationInfo& i) { return store_.GetRotation(i.name); },
      p->figures.rotations);
  if (!s.ok()) return s;
  auto schedules = store_.ListSchedules();
  if (!schedules.ok()) return schedules.status();
  p->schedules = std::move(*schedules);
  auto topics = store_.ListTopics();
  if (!topics.ok()) return topics.status();
  p->topics = std::move(*topics);
  // Without them (an older server's schema cannot hold them), the rest
  // still shows.
  if (auto waiting = store_.WaitingConsumers(); waiting.ok()) {
    p->figures.waiting = std::move(*waiting);
  }

  // Rates since the last picture; a picture taken too soon after it to
  // say much keeps the last rates.
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_map<std::string, std::size_t> before;
  if (latest_) {
    for (std::size_t i = 0; i < latest_->infos.size(); ++i) {
      before[latest_->infos[i].name] = i;
    }
  }
  const double seconds = latest_ ? Seconds(p->taken - latest_->taken) : 0;
  const bool too_soon = seconds < Seconds(options_.fresh) / 2;
  for (std::size_t i = 0; i < p->infos.size(); ++i) {
    Rates r{};
    auto it = before.find(p->infos[i].name);
    if (it != before.end()) {
      r = too_soon
              ? latest_->rates[it->second]
              : RatesBetween(CountersOf(latest_->figures.queues[it->second]),
                             CountersOf(p->figures.queues[i]), seconds);
    }
    p->rates.push_back(r);
  }
  latest_ = p;
  return std::shared_ptr<const Picture>(p);
}

Result<std::shared_ptr<const Picture>> Overview::Begun(
    std::chrono::steady_clock::time_point after) {
  // The newest picture when it began at `after` or later.
  auto found = [&]() -> std::shared_ptr<const Picture> {
    std::lock_guard<std::mutex> lock(mu_);
    if (latest_ && latest_->taken >= after) return latest_;
    return nullptr;
  };
  if (auto p = found()) return p;
  // One reading at a time: who waited here takes the one just made, when
  // it began after the time it asked for, however long it took.
  std::lock_guard<std::mutex> taking(take_mu_);
  if (auto p = found()) return p;
  return Take();
}

Result<std::shared_ptr<const Picture>> Overview::Latest() {
  return Begun(options_.now() - options_.fresh);
}

Result<std::shared_ptr<const Picture>> Overview::Read() {
  return Begun(options_.now());
}

Status Overview::Sample() {
  std::shared_ptr<const Picture> p;
  {
    std::lock_guard<std::mutex> taking(take_mu_);
    auto taken = Take();
    if (!taken.ok()) return taken.status();
    p = std::move(*taken);
  }
  // How many points each queue keeps: an hour of them, unless that many
  // for every queue exceeds the cap on them all.
  const std::size_t keep = std::max<std::size_t>(
      1,
      std::min(options_.points, options_.max_points /
                                    std::max<std::size_t>(1, p->infos.size())));
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_set<std::string> present;
  for (std::size_t i = 0; i < p->infos.size(); ++i) {
    const std::string& name = p->infos[i].name;
    const QueueStats& s = p->figures.queues[i];
    present.insert(name);
    Series& series = history_[name];
    HistoryPoint point{.at = p->at,
                       .ready = s.ready,
                       .delayed = s.delayed,
                       .leased = s.leased,
                       .dead = s.dead};
    const auto counters = CountersOf(s);
    if (series.taken != SteadyClock::time_point()) {
      point.rates = RatesBetween(series.counters, counters,
                                 Seconds(p->taken - series.taken));
    }
    series.counters = counters;
    series.taken = p->taken;
    series.points.push_back(point);
  }
  std::erase_if(history_, [&](const auto& entry) {
    return !present.contains(entry.first);
  });
  for (auto& [name, series] : history_) {
    if (series.points.size() <= keep) continue;
    series.points.erase(series.points.begin(),
                        series.points.end() - static_cast<long>(keep));
    series.points.shrink_to_fit();
  }
  return Status::Ok();
}

void Overview::StartSampling() {
  if (sampler_) return;
  sampler_ =
      std::make_unique<core::PeriodicThread>([this, failing = false]() mutable {
        // A failed reading (the database away) leaves a gap in the history,
        // said once in the log until the readings work again.
        Status s = Sample();
        if (!s.ok() && !failing) {
          Log("warn", "history_sample_failed",
              fmt::format("error={}", Quote(s.ToString())));
        } else if (s.ok() && failing) {
          Log("info", "history_sample_recovered");
        }
        failing = !s.ok();
        return options_.step;
      });
}

std::vector<HistoryPoint> Overview::History(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = history_.find(name);
  if (it == history_.end()) return {};
  return {it->second.points.begin(), it->second.points.end()};
}

namespace {

// A queue's rates, per second, as the overview and the history show them.
Json RatesJson(const Rates& r) {
  return {{"sends", r[0]},
          {"claims", r[1]},
          {"acks", r[2]},
          {"dead_lettered", r[3]}};
}

}  // namespace

Json OverviewJson(const Picture& picture, const TokenEntry* who,
                  const std::function<Metrics::Gauges()>& server_gauges) {
  auto sees = [&](const std::string& name) {
    return who == nullptr || Auth::Sees(*who, name);
  };
  // What the token may do with an object: the buttons a page shows.
  auto can = [&](const std::string& name) {
    Json list = Json::array();
    for (const auto& [perm, word] :
         {std::pair{kSend, "send"}, {kClaim, "claim"}, {kAdmin, "admin"}}) {
      if (who == nullptr || Auth::Allows(*who, perm, name)) {
        list.push_back(word);
      }
    }
    return list;
  };
  Json queues = Json::array();
  std::int64_t waiting = 0;  // in the queues the token sees
  for (std::size_t i = 0; i < picture.infos.size(); ++i) {
    const QueueInfo& info = picture.infos[i];
    if (!sees(info.name)) continue;
    Json q = wire::StatsJson(picture.figures.queues[i]);
    q["kind"] = "queue";
    q["waiting_consumers"] = picture.figures.WaitingFor(info.name);
    waiting += picture.figures.WaitingFor(info.name);
    q["groups"] = std::string(GroupModeName(info.options.groups));
    q["rates"] = RatesJson(picture.rates[i]);
    q["can"] = can(info.name);
    queues.push_back(std::move(q));
  }
  // Rings and rotations: their stats, kind and "can".
  auto each = [&](const auto& list, const char* kind, auto json) {
    Json out = Json::array();
    for (const auto& s : list) {
      if (!sees(s.name)) continue;
      Json j = json(s);
      j["kind"] = kind;
      j["can"] = can(s.name);
      out.push_back(std::move(j));
    }
    return out;
  };
  Json rings = each(picture.figures.rings, "ring",
                    [](const RingStats& s) { return wire::RingStatsJson(s); });
  Json rotations =
      each(picture.figures.rotations, "rotation",
           [](const RotationStats& s) { return wire::RotationStatsJson(s); });
  Json schedules = Json::array();
  for (const ScheduleInfo& s : picture.schedules) {
    if (!sees(s.options.queue)) continue;
    Json j = wire::ScheduleJson(s);
    j["can"] = can(s.options.queue);
    schedules.push_back(std::move(j));
  }
  Json topics = Json::array();
  for (const TopicInfo& t : picture.topics) {
    if (!sees(t.name)) continue;
    topics.push_back({{"name", t.name},
                      {"kind", "topic"},
                      {"created_at", wire::FormatTime(t.created_at)},
                      {"subscriptions", t.subscriptions},
                      {"can", can(t.name)}});
  }
  // The server's own figures, for those who may read /metrics.
  const bool metrics = who == nullptr || Auth::ReadsMetrics(*who);
  Json server = nullptr;
  if (metrics) {
    const Metrics::Gauges g = server_gauges();
    server = {{"connections", g.connections},
              {"waiting_consumers", g.waiting_consumers},
              {"requests_in_flight", g.requests_in_flight}};
  }
  return {
      {"at", wire::FormatTime(picture.at)}, {"waiting_consumers", waiting},
      {"server", std::move(server)},        {"metrics", metrics},
      {"queues", std::move(queues)},        {"rings", std::move(rings)},
      {"rotations", std::move(rotations)},  {"schedules", std::move(schedules)},
      {"topics", std::move(topics)}};
}

Json HistoryJson(const Overview& overview, const std::string& name) {
  Json points = Json::array();
  for (const HistoryPoint& h : overview.History(name)) {
    points.push_back({{"at", wire::FormatTime(h.at)},
                      {"ready", h.ready},
                      {"delayed", h.delayed},
                      {"leased", h.leased},
                      {"dead", h.dead},
                      {"rates", RatesJson(h.rates)}});
  }
  return {{"step_s",
           std::chrono::duration<double>(overview.options().step).count()},
          {"points", std::move(points)}};
}

}  // namespace sqlq::server
