// What every workload of sqlq-bench measures with, written once for the
// library workloads (bench.cc), the HTTP workloads (server_bench.cc) and
// the hand-written baselines: time, payloads that carry their send time,
// percentiles and medians, threads that stop at the first failure, the
// machine's fsync rate, and the fields that report a workload's runs.

#ifndef SQLQ_BENCH_STATS_H_
#define SQLQ_BENCH_STATS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sqlq/status.h"

namespace sqlq::bench {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::duration d);
double SecondsSince(SteadyClock::time_point start);

// The steady clock in nanoseconds: the stamp a payload carries.
std::int64_t NowNs();

// A payload of `size` bytes (at least the stamp and a space) that starts
// with `ns` (digits) and is padded with 'x': safe inside a JSON string and
// a beanstalkd job alike. StampOf reads the stamp back.
std::string StampedPayload(std::int64_t ns, std::size_t size);
std::int64_t StampOf(const std::string& payload);
// Microseconds from a payload's stamp to `now_ns`.
double MicrosSince(const std::string& payload, std::int64_t now_ns);

// The value at fraction `p` of the sorted values (nearest rank below); -1
// for none.
double Percentile(std::vector<double> v, double p);
// The middle value (the mean of the two middle ones); 0 for none.
double Median(std::vector<double> v);

// Runs `body(index)` on `n` threads and returns the first failure.
Status OnThreads(int n, const std::function<Status(int)>& body);

// Synchronous 4 KiB write + fdatasync() calls per second in `dir`, over
// about `seconds`: the ceiling on durable commits per second.
double MeasureFsyncRate(const std::string& dir, double seconds);

// A workload's row: "msgs_per_s" (the median of `rates`), "runs" and
// "msgs_per_s_each"; with AddLatencies, "p50_us" and "p99_us" (the medians
// of the runs' percentiles), when any run measured them.
void AddRates(nlohmann::ordered_json& row, const std::vector<double>& rates);
void AddLatencies(nlohmann::ordered_json& row, const std::vector<double>& p50,
                  const std::vector<double>& p99);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_STATS_H_
