#include "model/pair_evidence.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace tlp::model {
namespace {

constexpr double kScales[4] = {3600.0, 86400.0, 7 * 86400.0, 28 * 86400.0};

// What a source's recent interactions say of each partner: how often, how lately, which rank.
struct Partner {
  int count = 0;
  double last_ts = 0;
  int rank = 0;  // 1 = the most recent distinct partner
};
using Partners = std::unordered_map<int64_t, Partner>;

void CollectPartners(const NeighborBlock& lists, int64_t position, Partners* partners) {
  partners->clear();
  const int64_t k = lists.slots;
  for (int64_t slot = 0; slot < k; ++slot) {
    const size_t cell = static_cast<size_t>(position * k + slot);
    if (!lists.valid[cell]) break;  // padding comes last
    auto [it, inserted] = partners->try_emplace(lists.nodes[cell]);
    if (inserted) {
      it->second.last_ts = lists.ts[cell];  // newest first
      it->second.rank = static_cast<int>(partners->size());
    }
    ++it->second.count;
  }
}

}  // namespace

void ComputePairEvidence(const NeighborBlock& lists, std::span<const int64_t> keys,
                         std::span<const double> times, std::span<const int64_t> src_positions,
                         std::span<const int64_t> dst_positions, std::vector<float>* features) {
  const size_t pairs = src_positions.size();
  features->assign(pairs * kPairFeatures, 0.0f);
  const int64_t k = lists.slots;
  // A TopK asks one source against every candidate: its partners are collected once.
  Partners partners;
  int64_t partners_of = -1;
  // Per destination position, computed once: its interactions within each scale and its
  // distinct partners (a slice of `distinct`).
  struct Destination {
    std::array<int, 4> within{};
    size_t begin = 0, end = 0;
  };
  std::unordered_map<int64_t, Destination> destinations;
  std::vector<int64_t> distinct;
  std::unordered_set<int64_t> seen;
  for (size_t i = 0; i < pairs; ++i) {
    const int64_t s = src_positions[i], d = dst_positions[i];
    const double at = times[static_cast<size_t>(s)];
    if (s != partners_of) {
      CollectPartners(lists, s, &partners);
      partners_of = s;
    }
    float* out = features->data() + i * kPairFeatures;
    if (const auto met = partners.find(keys[static_cast<size_t>(d)]); met != partners.end()) {
      const Partner& partner = met->second;
      out[0] = 1;
      out[1] = static_cast<float>(std::log1p(partner.count));
      out[2] = 1.0f / static_cast<float>(partner.rank);
      const double age = std::max(0.0, at - partner.last_ts);
      for (int j = 0; j < 4; ++j) out[3 + j] = static_cast<float>(std::exp(-age / kScales[j]));
    }
    auto [it, fresh] = destinations.try_emplace(d);
    Destination& destination = it->second;
    if (fresh) {
      const double dst_at = times[static_cast<size_t>(d)];
      destination.begin = distinct.size();
      seen.clear();
      for (int64_t slot = 0; slot < k; ++slot) {
        const size_t cell = static_cast<size_t>(d * k + slot);
        if (!lists.valid[cell]) break;
        const double age = dst_at - lists.ts[cell];
        for (int j = 0; j < 4; ++j) destination.within[j] += age < kScales[j];
        if (seen.insert(lists.nodes[cell]).second) distinct.push_back(lists.nodes[cell]);
      }
      destination.end = distinct.size();
    }
    for (int j = 0; j < 4; ++j) {
      out[7 + j] = static_cast<float>(std::log1p(destination.within[j]));
    }
    const auto shared = std::count_if(distinct.begin() + static_cast<ptrdiff_t>(destination.begin),
                                      distinct.begin() + static_cast<ptrdiff_t>(destination.end),
                                      [&](int64_t partner) { return partners.contains(partner); });
    out[11] = static_cast<float>(std::log1p(static_cast<double>(shared)));
  }
}

}  // namespace tlp::model
