// Byte encodings of the store's keys and values. Keys are big-endian so that RocksDB's
// bytewise order is numeric order: a reverse seek from (node, t) then yields the node's most
// recent neighbours before t.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tlp::storage {

inline void PutBigEndian64(uint64_t value, char* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
}

inline uint64_t GetBigEndian64(const char* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | static_cast<unsigned char>(in[i]);
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
constexpr size_t kAdjacencyKeySize = 24;  // node, ts, seq

struct SequenceKey {
  char bytes[kSequenceKeySize];
  explicit SequenceKey(uint64_t sequence) { PutBigEndian64(sequence, bytes); }
  std::string_view view() const { return {bytes, sizeof(bytes)}; }
};

struct AdjacencyKey {
  char bytes[kAdjacencyKeySize];
  AdjacencyKey(uint64_t node, double ts, uint64_t sequence) {
    PutBigEndian64(node, bytes);
    PutBigEndian64(OrderedBits(ts), bytes + 8);
    PutBigEndian64(sequence, bytes + 16);
  }
  std::string_view view() const { return {bytes, sizeof(bytes)}; }
  static uint64_t Node(std::string_view key) { return GetBigEndian64(key.data()); }
  static double Ts(std::string_view key) { return FromOrderedBits(GetBigEndian64(key.data() + 8)); }
  static uint64_t Sequence(std::string_view key) { return GetBigEndian64(key.data() + 16); }
};

}  // namespace tlp::storage
