#include "model/pair_evidence.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace tlp::model {
namespace {

constexpr double kScales[4] = {3600.0, 86400.0, 7 * 86400.0, 28 * 86400.0};

// What a source's recent interactions say of one partner: how often, how lately, which rank.
struct Partner {
  int64_t key = 0;
  int count = 0;
  double last_ts = 0;
  int rank = 0;  // 1 = the most recent distinct partner
};

// The slots of `position`'s list up to its first padding.
int64_t ValidSlots(const NeighborBlock& lists, int64_t position) {
  const int64_t k = lists.slots;
  int64_t slots = 0;
  while (slots < k && lists.valid[static_cast<size_t>(position * k + slots)]) ++slots;
  return slots;
}

// A source's distinct partners, sorted by key for binary search (lists are at most a few
// hundred long: sorting beats hashing here, and no allocation once the scratch is warm).
void CollectPartners(const NeighborBlock& lists, int64_t position, std::vector<Partner>* out) {
  out->clear();
  const int64_t slots = ValidSlots(lists, position);
  const size_t first = static_cast<size_t>(position * lists.slots);
  for (int64_t slot = 0; slot < slots; ++slot) {  // newest first
    out->push_back({lists.nodes[first + slot], 1, lists.ts[first + slot], 0});
  }
  // Stable: among equal keys the newest stays first.
  std::stable_sort(out->begin(), out->end(),
                   [](const Partner& a, const Partner& b) { return a.key < b.key; });
  size_t kept = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    if (kept > 0 && (*out)[kept - 1].key == (*out)[i].key) {
      ++(*out)[kept - 1].count;
    } else {
      (*out)[kept++] = (*out)[i];
    }
  }
  out->resize(kept);
  // Recency rank: order of the last meetings, newest first.
  thread_local std::vector<std::pair<double, size_t>> order;
  order.clear();
  for (size_t i = 0; i < kept; ++i) order.push_back({-(*out)[i].last_ts, i});
  std::sort(order.begin(), order.end());
  for (size_t r = 0; r < order.size(); ++r) (*out)[order[r].second].rank = static_cast<int>(r + 1);
}

const Partner* Find(const std::vector<Partner>& partners, int64_t key) {
  const auto it = std::lower_bound(partners.begin(), partners.end(), key,
                                   [](const Partner& p, int64_t k) { return p.key < k; });
  return it != partners.end() && it->key == key ? &*it : nullptr;
}

// The source's most recent distinct partners whose own partners the second hop reads: a
// bound on its cost (a TopK reads at most this many extra lists).
constexpr size_t kMaxHopPartners = 32;

// Counts of the nodes two hops from a source (its partners' partners but itself), sorted by key.
struct Walks {
  std::vector<std::pair<int64_t, int>> counts;

  void Collect(const SecondHop& hop, int64_t position, int64_t source_key) {
    counts.clear();
    const int64_t k = hop.lists.slots;
    for (int64_t q = hop.begin[position]; q < hop.end[position]; ++q) {
      const int64_t slots = ValidSlots(hop.lists, q);
      for (int64_t slot = 0; slot < slots; ++slot) {
        const int64_t w = hop.lists.nodes[static_cast<size_t>(q * k + slot)];
        if (w != source_key) counts.push_back({w, 1});
      }
    }
    std::sort(counts.begin(), counts.end());
    size_t kept = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      if (kept > 0 && counts[kept - 1].first == counts[i].first) {
        ++counts[kept - 1].second;
      } else {
        counts[kept++] = counts[i];
      }
    }
    counts.resize(kept);
  }
  int Count(int64_t key) const {
    const auto it = std::lower_bound(counts.begin(), counts.end(), std::pair<int64_t, int>{key, 0});
    return it != counts.end() && it->first == key ? it->second : 0;
  }
};

// Occurrences of `key` in hop query q's list.
int CountInList(const NeighborBlock& lists, int64_t q, int64_t key) {
  const int64_t slots = ValidSlots(lists, q);
  const size_t first = static_cast<size_t>(q * lists.slots);
  int count = 0;
  for (int64_t slot = 0; slot < slots; ++slot) count += lists.nodes[first + slot] == key;
  return count;
}

// Features 16..18 of the pair (source position s, destination position d). Walks through the
// destination itself (source - d - w - d) are left out: they restate that the two met.
void AddWalks(const SecondHop& hop, const Walks& walks, const NeighborBlock& lists,
              std::span<const int64_t> keys, int64_t s, int64_t d,
              std::span<const int64_t> dst_distinct, float* out) {
  const int64_t source_key = keys[static_cast<size_t>(s)];
  const int64_t dst_key = keys[static_cast<size_t>(d)];
  int64_t via_dst = -1;  // the destination's hop query, when it is one of the source's partners
  for (int64_t q = hop.begin[s]; q < hop.end[s]; ++q) {
    if (hop.keys[static_cast<size_t>(q)] == dst_key) via_dst = q;
  }
  auto through_others = [&](int64_t w) {
    return walks.Count(w) - (via_dst >= 0 ? CountInList(hop.lists, via_dst, w) : 0);
  };
  const int64_t slots = ValidSlots(lists, d);
  const size_t first = static_cast<size_t>(d * lists.slots);
  double three = 0;
  for (int64_t slot = 0; slot < slots; ++slot) {
    const int64_t w = lists.nodes[first + slot];
    if (w != source_key) three += through_others(w);
  }
  int reached = 0;
  for (const int64_t w : dst_distinct) reached += w != source_key && through_others(w) > 0;
  out[16] = static_cast<float>(std::log1p(three));
  if (!dst_distinct.empty()) {
    out[17] = static_cast<float>(reached) / static_cast<float>(dst_distinct.size());
  }
  out[18] = static_cast<float>(std::log1p(walks.Count(dst_key)));
}

}  // namespace

void PlanSecondHop(const NeighborBlock& lists, std::span<const int64_t> keys,
                   std::span<const double> times, std::span<const int64_t> src_positions,
                   SecondHop* hop) {
  hop->keys.clear();
  hop->times.clear();
  hop->begin.assign(keys.size(), 0);
  hop->end.assign(keys.size(), 0);
  const int64_t k = lists.slots;
  int64_t previous = -1;
  for (const int64_t s : src_positions) {
    if (s == previous || hop->end[s] > hop->begin[s]) continue;  // planned already
    previous = s;
    const auto at = static_cast<int64_t>(hop->keys.size());
    hop->begin[s] = at;
    const int64_t slots = ValidSlots(lists, s);
    for (int64_t slot = 0; slot < slots; ++slot) {  // newest first
      const int64_t partner = lists.nodes[static_cast<size_t>(s * k + slot)];
      if (partner < 0) continue;
      const auto planned = hop->keys.begin() + at;
      if (std::find(planned, hop->keys.end(), partner) != hop->keys.end()) continue;
      hop->keys.push_back(partner);
      hop->times.push_back(times[static_cast<size_t>(s)]);
      if (hop->keys.size() - static_cast<size_t>(at) == kMaxHopPartners) break;
    }
    hop->end[s] = static_cast<int64_t>(hop->keys.size());
  }
}

void ComputePairEvidence(const NeighborBlock& lists, std::span<const int64_t> keys,
                         std::span<const double> times, std::span<const int64_t> src_positions,
                         std::span<const int64_t> dst_positions, const SecondHop* second_hop,
                         std::vector<float>* features) {
  const size_t pairs = src_positions.size();
  const int64_t width = second_hop != nullptr ? kPairFeatures + kPairWalkFeatures : kPairFeatures;
  features->assign(pairs * static_cast<size_t>(width), 0.0f);
  thread_local Walks walks;
  const int64_t k = lists.slots;
  // A TopK asks one source against every candidate: its partners are collected once.
  thread_local std::vector<Partner> partners;
  int64_t partners_of = -1;
  int64_t source_slots = 0;
  // Per destination position, computed once: its interactions within each scale and its
  // distinct partners (sorted, a slice of `distinct`).
  struct Destination {
    bool done = false;
    double newest_age = -1;  // < 0: no interaction
    std::array<int, 4> within{};
    size_t begin = 0, end = 0;
  };
  thread_local std::vector<Destination> destinations;
  thread_local std::vector<int64_t> distinct;
  destinations.assign(keys.size(), Destination());
  distinct.clear();
  for (size_t i = 0; i < pairs; ++i) {
    const int64_t s = src_positions[i], d = dst_positions[i];
    const double at = times[static_cast<size_t>(s)];
    if (s != partners_of) {
      CollectPartners(lists, s, &partners);
      partners_of = s;
      source_slots = ValidSlots(lists, s);
      if (second_hop != nullptr) walks.Collect(*second_hop, s, keys[static_cast<size_t>(s)]);
    }
    float* out = features->data() + i * static_cast<size_t>(width);
    out[12] = static_cast<float>(std::log1p(static_cast<double>(source_slots)));
    if (source_slots > 0) {
      out[13] = static_cast<float>(partners.size()) / static_cast<float>(source_slots);
    }
    if (const Partner* met = Find(partners, keys[static_cast<size_t>(d)]); met != nullptr) {
      out[0] = 1;
      out[1] = static_cast<float>(std::log1p(met->count));
      out[2] = 1.0f / static_cast<float>(met->rank);
      const double age = std::max(0.0, at - met->last_ts);
      for (int j = 0; j < 4; ++j) out[3 + j] = static_cast<float>(std::exp(-age / kScales[j]));
    }
    Destination& destination = destinations[static_cast<size_t>(d)];
    if (!destination.done) {
      destination.done = true;
      const double dst_at = times[static_cast<size_t>(d)];
      const int64_t slots = ValidSlots(lists, d);
      const size_t first = static_cast<size_t>(d * k);
      destination.begin = distinct.size();
      if (slots > 0) destination.newest_age = std::max(0.0, dst_at - lists.ts[first]);
      for (int64_t slot = 0; slot < slots; ++slot) {
        const double age = dst_at - lists.ts[first + slot];
        for (int j = 0; j < 4; ++j) destination.within[j] += age < kScales[j];
        distinct.push_back(lists.nodes[first + slot]);
      }
      const auto begin = distinct.begin() + static_cast<ptrdiff_t>(destination.begin);
      std::sort(begin, distinct.end());
      distinct.erase(std::unique(begin, distinct.end()), distinct.end());
      destination.end = distinct.size();
    }
    for (int j = 0; j < 4; ++j) {
      out[7 + j] = static_cast<float>(std::log1p(destination.within[j]));
    }
    if (destination.newest_age >= 0) {
      out[14] = static_cast<float>(std::exp(-destination.newest_age / kScales[0]));
      out[15] = static_cast<float>(std::exp(-destination.newest_age / kScales[1]));
    }
    // Distinct partners of the destination that the source also has.
    int shared = 0;
    for (size_t p = destination.begin; p < destination.end; ++p) {
      shared += Find(partners, distinct[p]) != nullptr;
    }
    out[11] = static_cast<float>(std::log1p(shared));
    if (second_hop != nullptr) {
      AddWalks(*second_hop, walks, lists, keys, s, d,
               std::span<const int64_t>(distinct).subspan(destination.begin,
                                                          destination.end - destination.begin),
               out);
    }
  }
}

}  // namespace tlp::model
