#include "tools/training/wire.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(WireTest, ReadsBackWhatWasWritten) {
  ByteWriter w;
  w.I64(-42);
  w.F64(0.1);
  w.Str("blocks.0.attn.qkv.weight");
  w.I64s(std::vector<int64_t>{24, 8});
  w.F32s(std::vector<float>{1.5f, -2.25f, 3e-8f});
  const std::string bytes = w.Take();
  ByteReader r(bytes);
  EXPECT_THAT(r.I64(), IsOkAndHolds(-42));
  EXPECT_THAT(r.F64(), IsOkAndHolds(0.1));
  EXPECT_THAT(r.Str(), IsOkAndHolds("blocks.0.attn.qkv.weight"));
  EXPECT_THAT(r.I64s(), IsOkAndHolds(ElementsAre(24, 8)));
  EXPECT_THAT(r.F32s(), IsOkAndHolds(ElementsAre(1.5f, -2.25f, 3e-8f)));
  EXPECT_TRUE(r.done());
}

TEST(WireTest, ShortOrCorruptInputIsDataLossNotAnAllocation) {
  ByteWriter w;
  w.I64(int64_t{1} << 60);  // a count no input of this size can hold
  const std::string huge = w.Take();
  ByteReader r(huge);
  EXPECT_THAT(r.F32s(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("a count of")));
  ByteReader empty("");
  EXPECT_THAT(empty.I64(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("8 bytes wanted")));
  ByteWriter negative;
  negative.I64(-1);
  const std::string bytes = negative.Take();
  ByteReader n(bytes);
  EXPECT_THAT(n.Str(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("a count of -1")));
}

TEST(WireTest, ParametersRoundTrip) {
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  GptParameter p;
  p.name = "wte";
  p.shape = {3, 2};
  p.full_shape = {6, 2};
  p.split = TpSplit::kRows;
  p.parts = 1;
  p.values = absl::MakeSpan(values);
  LOOM_ASSERT_OK_AND_ASSIGN(RankParameters back, DecodeParameters(EncodeParameters(1, {p})));
  EXPECT_EQ(back.tp_rank, 1);
  ASSERT_EQ(back.params.size(), 1u);
  EXPECT_EQ(back.params[0].name, "wte");
  EXPECT_THAT(back.params[0].full_shape, ElementsAre(6, 2));
  EXPECT_EQ(back.params[0].split, TpSplit::kRows);
  EXPECT_EQ(back.values[0], values);
  // Truncated anywhere: an error, never a crash.
  const std::string bytes = EncodeParameters(1, {p});
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(DecodeParameters(bytes.substr(0, cut)).ok()) << cut;
  }
}

TEST(WireTest, TraceIsChromeJsonWithOneThreadPerRank) {
  // A name with a quote and a backslash: written escaped, read back whole.
  std::vector<std::vector<TraceEvent>> ranks = {{{"F0 \"x\\", 1000, 3000}}, {{"B0", 2000, 5500}}};
  const std::string text = TraceEvents(ranks);
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(json.is_discarded()) << text;
  const nlohmann::json& events = json["traceEvents"];
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["name"], "thread_name");
  EXPECT_EQ(events[0]["args"]["name"], "rank 0");
  EXPECT_EQ(events[2]["args"]["name"], "rank 1");
  // Times in microseconds from the earliest start.
  EXPECT_EQ(events[1]["name"], "F0 \"x\\");
  EXPECT_EQ(events[1]["ph"], "X");
  EXPECT_EQ(events[1]["tid"], 0);
  EXPECT_EQ(events[1]["ts"], 0.0);
  EXPECT_EQ(events[1]["dur"], 2.0);
  EXPECT_EQ(events[3]["tid"], 1);
  EXPECT_EQ(events[3]["ts"], 1.0);
  EXPECT_EQ(events[3]["dur"], 3.5);
}

}  // namespace
}  // namespace loom
