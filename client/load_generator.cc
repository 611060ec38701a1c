#include "client/load_generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

namespace tlp::client {
namespace {

using Clock = std::chrono::steady_clock;

bool IsLoopback(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return host == "localhost" || host == "[::1]" || host.starts_with("127.") ||
         address.starts_with("unix:");
}

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto index = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size()))) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

}  // namespace

Status RunLoad(DaemonClient& client, const LoadOptions& options, LoadReport* report) {
  *report = LoadReport();
  if (!IsLoopback(client.address())) {
    return Status::InvalidArgument(
        "tlpctl bench only targets loopback addresses (127.x, localhost, [::1]); got " +
        client.address());
  }
  if (options.kind != "score" && options.kind != "topk") {
    return Status::InvalidArgument("--kind must be score or topk, not " + options.kind);
  }
  if (options.concurrency < 1) return Status::InvalidArgument("--concurrency must be >= 1");
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(options.duration_seconds));
  // Each caller's share of the rate, as the interval between its requests.
  const auto interval = options.rate > 0
                            ? std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(options.concurrency / options.rate))
                            : Clock::duration::zero();
  std::atomic<uint64_t> issued{0};
  std::mutex mutex;
  std::vector<double> latencies_ms;
  std::vector<std::thread> callers;
  for (int caller = 0; caller < options.concurrency; ++caller) {
    callers.emplace_back([&, caller] {
      std::mt19937_64 random(options.seed * 1000003 + static_cast<uint64_t>(caller));
      auto pick = [&](const std::vector<uint64_t>& pool) {
        if (pool.empty()) return std::uniform_int_distribution<uint64_t>(1, 1000)(random);
        return pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(random)];
      };
      std::vector<double> mine;
      std::map<std::string, uint64_t> failures;
      // Callers start staggered across one interval so the rate is smooth.
      auto due = start + interval * caller / options.concurrency;
      while (true) {
        if (interval > Clock::duration::zero()) {
          std::this_thread::sleep_until(due);
        } else {
          due = Clock::now();
        }
        if (due >= end || issued.fetch_add(1) >= options.max_requests) break;
        grpc::ClientContext context;
        client.Prepare(&context);
        grpc::Status status;
        if (options.kind == "score") {
          tlp::v1::ScoreRequest request;
          for (size_t p = 0; p < options.pairs; ++p) {
            auto* query = request.add_queries();
            query->set_src(pick(options.sources));
            query->set_dst(pick(options.destinations));
          }
          tlp::v1::ScoreResponse response;
          status = client.stub().ScoreLinks(&context, request, &response);
        } else {
          tlp::v1::TopKRequest request;
          request.set_src(pick(options.sources));
          request.set_k(options.k);
          tlp::v1::TopKResponse response;
          status = client.stub().TopK(&context, request, &response);
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - due).count();
        if (status.ok()) {
          mine.push_back(ms);
        } else {
          ++failures[std::to_string(static_cast<int>(status.error_code())) + " " +
                     status.error_message().substr(0, 80)];
        }
        due += interval;
      }
      std::lock_guard lock(mutex);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
      for (const auto& [code, count] : failures) {
        report->failures_by_code[code] += count;
        report->failures += count;
      }
    });
  }
  for (auto& caller : callers) caller.join();
  report->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  report->requests = latencies_ms.size() + report->failures;
  std::sort(latencies_ms.begin(), latencies_ms.end());
  report->requests_per_second = static_cast<double>(latencies_ms.size()) / report->seconds;
  report->pairs_per_second = report->requests_per_second *
                             static_cast<double>(options.kind == "score" ? options.pairs : 1);
  report->p50_ms = Percentile(latencies_ms, 0.50);
  report->p95_ms = Percentile(latencies_ms, 0.95);
  report->p99_ms = Percentile(latencies_ms, 0.99);
  report->max_ms = latencies_ms.empty() ? 0 : latencies_ms.back();
  return Status::Ok();
}

}  // namespace tlp::client
