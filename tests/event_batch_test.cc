#include "common/event_batch.h"

#include <gtest/gtest.h>

namespace tlp {
namespace {

// Event ids and state labels are optional columns: a batch that gets its first one later, or
// is appended to one without them, keeps every column as long as the batch.
TEST(EventBatch, OptionalColumnsStayAlignedThroughAddAndAppend) {
  EventBatch batch;
  batch.Add(1, 2, 0.0);
  batch.Add(1, 3, 1.0, {}, "b");
  EXPECT_TRUE(batch.state_labels.empty());
  EventBatch labelled;
  labelled.Add(4, 5, 2.0, {}, {}, 1);
  labelled.Add(4, 6, 3.0, {}, {}, 0);
  batch.Append(labelled);
  EventBatch plain;
  plain.Add(7, 8, 4.0);
  batch.Append(plain);
  ASSERT_EQ(batch.size(), 5u);
  ASSERT_EQ(batch.event_ids.size(), 5u);
  ASSERT_EQ(batch.state_labels.size(), 5u);
  EXPECT_EQ(batch.EventIdOf(0), "");
  EXPECT_EQ(batch.EventIdOf(1), "b");
  EXPECT_EQ(batch.EventIdOf(2), "");
  EXPECT_EQ(batch.StateLabelOf(1), EventBatch::kNoStateLabel);
  EXPECT_EQ(batch.StateLabelOf(2), 1);
  EXPECT_EQ(batch.StateLabelOf(3), 0);
  EXPECT_EQ(batch.StateLabelOf(4), EventBatch::kNoStateLabel);
  EXPECT_EQ(batch.dst[4], 8u);
  batch.Clear();
  EXPECT_TRUE(batch.state_labels.empty() && batch.event_ids.empty() && batch.empty());
}

}  // namespace
}  // namespace tlp
