#include "common/graph_generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace tlp {
namespace {

EventBatch Generate(const GraphGeneratorOptions& options, size_t batch_size = 777) {
  GraphGenerator generator(options);
  EventBatch all, batch;
  for (generator.Next(batch_size, &batch); !batch.empty(); generator.Next(batch_size, &batch)) {
    for (size_t i = 0; i < batch.size(); ++i) all.Add(batch.src[i], batch.dst[i], batch.ts[i]);
  }
  return all;
}

TEST(GraphGenerator, SameSeedSameStreamWhateverTheBatching) {
  GraphGeneratorOptions options;
  options.events = 5000;
  options.nodes = 300;
  const EventBatch a = Generate(options, 777), b = Generate(options, 5000);
  EXPECT_EQ(a.size(), 5000u);
  EXPECT_EQ(a.src, b.src);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_EQ(a.ts, b.ts);
  options.seed = 2;
  EXPECT_NE(Generate(options).src, a.src);
}

// One graph over nodes 1..500, one bipartite: sources 1..400, destinations 401..450.
TEST(GraphGenerator, NodesStayInTheirRangesTimeAscendsNoSelfLoops) {
  struct Case {
    uint64_t nodes, destinations, src_last, dst_first, dst_last;
  };
  for (const Case& c : {Case{500, 0, 500, 1, 500}, Case{400, 50, 400, 401, 450}}) {
    GraphGeneratorOptions options;
    options.events = 20000;
    options.nodes = c.nodes;
    options.destinations = c.destinations;
    const EventBatch events = Generate(options);
    for (size_t i = 0; i < events.size(); ++i) {
      ASSERT_GE(events.src[i], 1u);
      ASSERT_LE(events.src[i], c.src_last);
      ASSERT_GE(events.dst[i], c.dst_first);
      ASSERT_LE(events.dst[i], c.dst_last);
      ASSERT_NE(events.src[i], events.dst[i]);
      if (i > 0) {
        ASSERT_GE(events.ts[i], events.ts[i - 1]);
      }
    }
  }
}

// The shape that makes it a useful stand-in for real streams: heavy-tailed degrees (the top 1 %
// of nodes hold far more than 1 % of the endpoints), every node eventually used, and bursty
// time (gaps with a coefficient of variation well above a Poisson stream's 1, mean near 1/rate).
TEST(GraphGenerator, DegreesAreHeavyTailedAndTimeIsBursty) {
  GraphGeneratorOptions options;
  options.events = 200000;
  options.nodes = 10000;
  options.events_per_second = 4;
  const EventBatch events = Generate(options);
  std::unordered_map<uint64_t, uint64_t> degree;
  for (size_t i = 0; i < events.size(); ++i) {
    ++degree[events.src[i]];
    ++degree[events.dst[i]];
  }
  EXPECT_EQ(degree.size(), 10000u);
  std::vector<uint64_t> degrees;
  for (const auto& [node, count] : degree) degrees.push_back(count);
  std::sort(degrees.rbegin(), degrees.rend());
  uint64_t top = 0;
  for (size_t i = 0; i < degrees.size() / 100; ++i) top += degrees[i];
  EXPECT_GT(static_cast<double>(top) / (2.0 * static_cast<double>(events.size())), 0.05);

  double sum = 0, square_sum = 0;
  const size_t gaps = events.size() - 1;
  for (size_t i = 1; i < events.size(); ++i) {
    const double gap = events.ts[i] - events.ts[i - 1];
    sum += gap;
    square_sum += gap * gap;
  }
  const double mean = sum / static_cast<double>(gaps);
  const double deviation = std::sqrt(square_sum / static_cast<double>(gaps) - mean * mean);
  EXPECT_NEAR(mean, 0.25, 0.1);
  EXPECT_GT(deviation / mean, 1.5);
}

}  // namespace
}  // namespace tlp
