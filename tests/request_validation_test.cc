#include "server/request_validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace tlp::server {
namespace {

tlp::v1::EdgeEvent Event(uint64_t src, uint64_t dst, double ts) {
  tlp::v1::EdgeEvent event;
  event.set_src(src);
  event.set_dst(dst);
  event.set_ts(ts);
  return event;
}

// INVALID_ARGUMENT whose message names `field` and, for an event, its index.
void ExpectRefused(const Status& status, const std::string& field, const std::string& where) {
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("'" + field + "'"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find(where), std::string::npos) << status.ToString();
}

TEST(RequestValidationTest, AppendsAValidEventWithItsFeaturesAndId) {
  EventBatch batch;
  batch.feature_dim = 2;
  tlp::v1::EdgeEvent event = Event(7, 9, 12.5);
  event.add_features(1.5f);
  event.add_features(-2.0f);
  event.set_event_id("order-1");
  ASSERT_TRUE(AppendEdgeEvent(event, 0, &batch).ok());
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch.src[0], 7u);
  EXPECT_EQ(batch.dst[0], 9u);
  EXPECT_EQ(batch.ts[0], 12.5);
  EXPECT_EQ(batch.FeaturesOf(0)[1], -2.0f);
  EXPECT_EQ(batch.EventIdOf(0), "order-1");
}

TEST(RequestValidationTest, RefusesTsThatIsNotFiniteOrNegative) {
  for (double ts : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    EventBatch batch;
    ExpectRefused(AppendEdgeEvent(Event(1, 2, ts), 3, &batch), "ts", "event 3");
    EXPECT_EQ(batch.size(), 0u);
  }
}

TEST(RequestValidationTest, RefusesFeaturesOfTheWrongWidthOrNotFinite) {
  EventBatch batch;
  batch.feature_dim = 2;
  tlp::v1::EdgeEvent event = Event(1, 2, 3.0);
  event.add_features(1.0f);
  ExpectRefused(AppendEdgeEvent(event, 0, &batch), "features", "event 0");
  event.add_features(std::numeric_limits<float>::quiet_NaN());
  ExpectRefused(AppendEdgeEvent(event, 0, &batch), "features", "NaN");
  EXPECT_EQ(batch.size(), 0u);
}

TEST(RequestValidationTest, RefusesAnEventIdOver128Bytes) {
  EventBatch batch;
  tlp::v1::EdgeEvent event = Event(1, 2, 3.0);
  event.set_event_id(std::string(128, 'x'));
  EXPECT_TRUE(AppendEdgeEvent(event, 0, &batch).ok());
  event.set_event_id(std::string(129, 'x'));
  ExpectRefused(AppendEdgeEvent(event, 1, &batch), "event_id", "event 1");
  EXPECT_EQ(batch.size(), 1u);
}

TEST(RequestValidationTest, BatchMustBeNonEmptyAndWithinTheLimit) {
  EventBatch batch;
  tlp::v1::IngestBatchRequest request;
  ExpectRefused(ToEventBatch(request, 10, &batch), "events", "empty");
  for (int i = 0; i < 11; ++i) *request.add_events() = Event(i, i + 1, i);
  ExpectRefused(ToEventBatch(request, 10, &batch), "events", "at most 10");
  ASSERT_TRUE(ToEventBatch(request, 11, &batch).ok());
  EXPECT_EQ(batch.size(), 11u);
}

TEST(RequestValidationTest, BatchNamesItsFirstBadEventAndStartsFromEmpty) {
  EventBatch batch;
  batch.feature_dim = 0;
  batch.Add(100, 200, 1.0);  // left over from an earlier request: cleared
  tlp::v1::IngestBatchRequest request;
  *request.add_events() = Event(1, 2, 1.0);
  *request.add_events() = Event(1, 2, -5.0);
  *request.add_events() = Event(1, 2, std::nan(""));
  ExpectRefused(ToEventBatch(request, 10, &batch), "ts", "event 1");
  request.mutable_events(1)->set_ts(2.0);
  request.mutable_events(2)->set_ts(3.0);
  ASSERT_TRUE(ToEventBatch(request, 10, &batch).ok());
  EXPECT_EQ(batch.src, (std::vector<uint64_t>{1, 1, 1}));
  EXPECT_EQ(batch.ts, (std::vector<double>{1.0, 2.0, 3.0}));
}

TEST(RequestValidationTest, StateLabelIsOptionalAndZeroOrOne) {
  EventBatch batch;
  tlp::v1::EdgeEvent event = Event(1, 2, 3);
  ASSERT_TRUE(AppendEdgeEvent(event, 0, &batch).ok());
  event.set_state_label(1);
  ASSERT_TRUE(AppendEdgeEvent(event, 1, &batch).ok());
  event.set_state_label(0);
  ASSERT_TRUE(AppendEdgeEvent(event, 2, &batch).ok());
  EXPECT_EQ(batch.StateLabelOf(0), EventBatch::kNoStateLabel);
  EXPECT_EQ(batch.StateLabelOf(1), 1);
  EXPECT_EQ(batch.StateLabelOf(2), 0);
  event.set_state_label(2);
  ExpectRefused(AppendEdgeEvent(event, 3, &batch), "state_label", "event 3");
  EXPECT_EQ(batch.size(), 3u);
}

}  // namespace
}  // namespace tlp::server
