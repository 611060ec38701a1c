// Byte encodings of the store's keys and values. Keys are big-endian so that RocksDB's
// bytewise order is numeric order: a reverse seek from (epoch, node, t) then yields the node's
// most recent neighbours in that epoch before t.
#pragma once

#include <bit>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tlp::storage {

// Unsigned integers, most significant byte first.
template <std::unsigned_integral T>
inline void PutBigEndian(T value, char* out) {
  for (int i = static_cast<int>(sizeof(T)) - 1; i >= 0; --i) {
    out[i] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
}

template <std::unsigned_integral T>
inline T GetBigEndian(const char* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value = (value << 8) | static_cast<unsigned char>(in[i]);
  return value;
}

// Maps doubles to integers of the same order (sign flip for positives, all bits for negatives).
inline uint64_t OrderedBits(double value) {
  const auto bits = std::bit_cast<uint64_t>(value);
  return (bits >> 63) ? ~bits : bits | (1ULL << 63);
}
inline double FromOrderedBits(uint64_t ordered) {
  const uint64_t bits = (ordered >> 63) ? ordered & ~(1ULL << 63) : ~ordered;
  return std::bit_cast<double>(bits);
}

constexpr size_t kSequenceKeySize = 8;
constexpr size_t kAdjacencyKeySize = 28;    // epoch, node, ts, seq
constexpr size_t kAdjacencyValueSize = 12;  // neighbour, previous epoch of the node
// "No epoch": the previous epoch of a node's first rows, the newest epoch of an unknown node.
constexpr uint32_t kNoEpoch = 0xFFFFFFFFu;

struct SequenceKey {
  char bytes[kSequenceKeySize];
  explicit SequenceKey(uint64_t sequence) { PutBigEndian<uint64_t>(sequence, bytes); }
  std::string_view view() const { return {bytes, sizeof(bytes)}; }
};

// Adjacency rows are partitioned by epoch (a fixed run of store sequences, see
// StoreOptions::adjacency_epoch_bits) before node: a memtable then only holds keys of the newest
// epoch or two, so compaction merges each flush into that epoch's files alone and older epochs,
// whose key ranges no new row overlaps, sink to the last level by trivial moves. Keyed by node
// first, every flush overlapped every file of every level, and compaction rewrote the whole
// adjacency again at each level (the largest part of compaction, itself half of both cores at
// 80M events). A node's rows within an epoch are contiguous and ascend in (ts, seq); each
// row's value names the epoch of the node's rows before this epoch, so a reverse walk goes from
// epoch to epoch without probing the ones that lack the node.
struct AdjacencyKey {
  char bytes[kAdjacencyKeySize];
  AdjacencyKey(uint32_t epoch, uint64_t node, double ts, uint64_t sequence) {
    PutBigEndian<uint32_t>(epoch, bytes);
    PutBigEndian<uint64_t>(node, bytes + 4);
    PutBigEndian<uint64_t>(OrderedBits(ts), bytes + 12);
    PutBigEndian<uint64_t>(sequence, bytes + 20);
  }
  std::string_view view() const { return {bytes, sizeof(bytes)}; }
  static uint32_t Epoch(std::string_view key) { return GetBigEndian<uint32_t>(key.data()); }
  static uint64_t Node(std::string_view key) { return GetBigEndian<uint64_t>(key.data() + 4); }
  static double Ts(std::string_view key) {
    return FromOrderedBits(GetBigEndian<uint64_t>(key.data() + 12));
  }
  static uint64_t Sequence(std::string_view key) { return GetBigEndian<uint64_t>(key.data() + 20); }
  // The (epoch, node) group a key belongs to, as a comparable prefix.
  static std::string_view Group(std::string_view key) { return key.substr(0, 12); }
};

struct AdjacencyValue {
  char bytes[kAdjacencyValueSize];
  AdjacencyValue(uint64_t neighbor, uint32_t previous_epoch) {
    PutBigEndian<uint64_t>(neighbor, bytes);
    PutBigEndian<uint32_t>(previous_epoch, bytes + 8);
  }
  std::string_view view() const { return {bytes, sizeof(bytes)}; }
  static uint64_t Neighbor(std::string_view value) { return GetBigEndian<uint64_t>(value.data()); }
  static uint32_t PreviousEpoch(std::string_view value) {
    return GetBigEndian<uint32_t>(value.data() + 8);
  }
};

}  // namespace tlp::storage
