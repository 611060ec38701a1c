#include "model/dygformer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace tlp::model {
namespace {

// Query positions: 0 = node 10 with partners 20, 30, 20; 1 = node 30 with partner 10;
// 2 = an unknown node (key -1, no partners).
NeighborBlock Lists() {
  NeighborBlock lists;
  lists.Reset(3, 3, 0);
  const std::vector<int64_t> nodes = {20, 30, 20, 10, 0, 0, 0, 0, 0};
  const std::vector<uint8_t> valid = {1, 1, 1, 1, 0, 0, 0, 0, 0};
  lists.nodes = nodes;
  lists.valid = valid;
  return lists;
}

// counts[link][side][token] as (own, other).
std::pair<float, float> At(const std::vector<float>& counts, size_t link, size_t side,
                           size_t token) {
  const size_t cell = ((link * 2 + side) * 4 + token) * 2;
  return {counts[cell], counts[cell + 1]};
}

TEST(CountCooccurrences, CountsEachTokenInBothSequences) {
  const std::vector<int64_t> keys = {10, 30, -1};
  const std::vector<int64_t> src = {0, 0}, dst = {1, 2};
  std::vector<float> counts;
  CountCooccurrences(Lists(), keys, src, dst, &counts);
  ASSERT_EQ(counts.size(), 2u * 2 * 4 * 2);
  // Link 0, source side [10, 20, 30, 20] against [30, 10].
  EXPECT_EQ(At(counts, 0, 0, 0), std::make_pair(1.0f, 1.0f));  // 10: itself; once in dst's
  EXPECT_EQ(At(counts, 0, 0, 1), std::make_pair(2.0f, 0.0f));  // 20 twice, never in dst's
  EXPECT_EQ(At(counts, 0, 0, 2), std::make_pair(1.0f, 1.0f));  // 30: the destination itself
  // Destination side [30, 10, pad, pad].
  EXPECT_EQ(At(counts, 0, 1, 0), std::make_pair(1.0f, 1.0f));
  EXPECT_EQ(At(counts, 0, 1, 1), std::make_pair(1.0f, 1.0f));
  EXPECT_EQ(At(counts, 0, 1, 2), std::make_pair(0.0f, 0.0f));  // padding
  // Link 1: an unknown destination matches nothing, not even another unknown.
  EXPECT_EQ(At(counts, 1, 0, 0), std::make_pair(1.0f, 0.0f));
  EXPECT_EQ(At(counts, 1, 1, 0), std::make_pair(1.0f, 0.0f));
  EXPECT_EQ(At(counts, 1, 1, 1), std::make_pair(0.0f, 0.0f));
}

TEST(CountCooccurrences, RefusesKeysOfAnotherLength) {
  std::vector<float> counts;
  const std::vector<int64_t> keys = {10, 30};
  const std::vector<int64_t> positions = {0};
  EXPECT_THROW(CountCooccurrences(Lists(), keys, positions, positions, &counts),
               std::invalid_argument);
}

DyGFormerOptions SmallOptions(int64_t patch_size) {
  DyGFormerOptions options;
  options.token_dim = 3;
  options.model_dim = 8;
  options.cooccurrence_dim = 4;
  options.heads = 2;
  options.layers = 2;
  options.sequence_length = 4;
  options.patch_size = patch_size;
  options.p = 2.0;
  options.dropout = 0.0;
  return options;
}

TEST(DyGFormer, PaddingIsMaskedAndCooccurrenceChangesBothSides) {
  torch::manual_seed(3);
  DyGFormer model(SmallOptions(1));
  torch::Tensor tokens = torch::randn({2, 4, 3});
  const torch::Tensor valid =
      torch::tensor({{true, true, true, false}, {true, true, false, false}});
  const SequencePatches encoded = model->EncodeSequences(tokens, valid);
  EXPECT_EQ(encoded.patches.sizes(), (std::vector<int64_t>{2, 4, 8}));
  // counts [1 link, 2 sides, 4 tokens, 2]: own count 1 on the real tokens.
  torch::Tensor counts = torch::zeros({1, 2, 4, 2});
  counts.select(1, 0).narrow(0, 0, 1).narrow(1, 0, 3).select(-1, 0).fill_(1);
  counts.select(1, 1).narrow(1, 0, 2).select(-1, 0).fill_(1);
  auto pair = [&](const SequencePatches& sequences, const torch::Tensor& link_counts) {
    const SequencePatches src{sequences.patches.narrow(0, 0, 1), sequences.valid.narrow(0, 0, 1)};
    const SequencePatches dst{sequences.patches.narrow(0, 1, 1), sequences.valid.narrow(0, 1, 1)};
    return model->EncodePairs(src, dst, link_counts);
  };
  const PairEncoding base = pair(encoded, counts);
  EXPECT_EQ(base.src.sizes(), (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(base.src_metrics.neighbors_used.item<int64_t>(), 2);
  EXPECT_EQ(base.dst_metrics.neighbors_used.item<int64_t>(), 1);

  // Padded tokens' inputs change nothing.
  tokens[0][3].fill_(100.0);
  tokens[1].narrow(0, 2, 2).fill_(-100.0);
  const PairEncoding padded = pair(model->EncodeSequences(tokens, valid), counts);
  EXPECT_TRUE(torch::allclose(base.src, padded.src, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(base.dst, padded.dst, 1e-5, 1e-5));

  // The source's second token also occurs in the destination's sequence: both sides move.
  torch::Tensor shared = counts.clone();
  shared[0][0][1][1] = 1;
  shared[0][1][1][1] = 1;
  const PairEncoding cooccurring = pair(encoded, shared);
  EXPECT_FALSE(torch::allclose(base.src, cooccurring.src));
  EXPECT_FALSE(torch::allclose(base.dst, cooccurring.dst));
}

TEST(DyGFormer, PatchesGroupTokensAndRefuseLengthsTheyDoNotDivide) {
  torch::manual_seed(4);
  DyGFormer model(SmallOptions(2));
  const torch::Tensor valid = torch::tensor({{true, true, true, false}});
  const SequencePatches encoded = model->EncodeSequences(torch::randn({1, 4, 3}), valid);
  EXPECT_EQ(encoded.patches.sizes(), (std::vector<int64_t>{1, 2, 8}));
  EXPECT_TRUE(encoded.valid.all().item<bool>());  // the second patch holds one real token
  EXPECT_THROW(DyGFormer(SmallOptions(3)), std::invalid_argument);
}

}  // namespace
}  // namespace tlp::model
