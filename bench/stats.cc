#include "bench/stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace sqlq::bench {

double Seconds(SteadyClock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double SecondsSince(SteadyClock::time_point start) {
  return Seconds(SteadyClock::now() - start);
}

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

std::string StampedPayload(std::int64_t ns, std::size_t size) {
  std::string p = std::to_string(ns);
  p.push_back(' ');
  if (p.size() < size) p.resize(size, 'x');
  return p;
}

std::int64_t StampOf(const std::string& payload) {
  return std::strtoll(payload.c_str(), nullptr, 10);
}

double MicrosSince(const std::string& payload, std::int64_t now_ns) {
  return static_cast<double>(now_ns - StampOf(payload)) / 1000.0;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  const auto k =
      static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

Status OnThreads(int n, const std::function<Status(int)>& body) {
  std::mutex mu;
  Status failure;
  std::vector<std::thread> pool;
  for (int i = 0; i < n; ++i) {
    pool.emplace_back([&, i] {
      Status s = body(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.ok()) failure = s;
      }
    });
  }
  for (auto& t : pool) t.join();
  return failure;
}

double MeasureFsyncRate(const std::string& dir, double seconds) {
  std::string path = dir + "/.sqlq-fsync-probe";
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  char block[4096];
  std::memset(block, 'f', sizeof block);
  long n = 0;
  auto start = SteadyClock::now();
  while (SecondsSince(start) < seconds) {
    if (pwrite(fd, block, sizeof block, (n % 16) * 4096) < 0) break;
    if (fdatasync(fd) != 0) break;
    ++n;
  }
  double elapsed = SecondsSince(start);
  close(fd);
  unlink(path.c_str());
  return elapsed > 0 ? n / elapsed : 0;
}

void AddRates(nlohmann::ordered_json& row, const std::vector<double>& rates) {
  row["msgs_per_s"] = std::lround(Median(rates));
  row["runs"] = rates.size();
  nlohmann::ordered_json each = nlohmann::ordered_json::array();
  for (double r : rates) each.push_back(std::lround(r));
  row["msgs_per_s_each"] = each;
}

void AddLatencies(nlohmann::ordered_json& row, const std::vector<double>& p50,
                  const std::vector<double>& p99) {
  if (p50.empty()) return;
  row["p50_us"] = std::lround(Median(p50));
  row["p99_us"] = std::lround(Median(p99));
}

}  // namespace sqlq::bench
