// RingAttentionForward / Backward on cp = 1..4 thread ranks against a double-precision
// attention of the whole sequence written out with plain loops, for both layouts,
// causal and full masks, sequence lengths that do and do not divide into the chunks
// (and shorter than the chunk count, so some ranks hold nothing), d = 8 and 16. Each
// rank's rows are gathered back to their global positions and compared within 2e-5
// (out, lse) and 5e-5 (gradients) of the reference's largest magnitude, as
// flash_attention_test does. Also: the elements each rank sends, the layouts' cover and
// causal balance, cp = 1 against plain flash attention bit for bit, and bad input.
#include "tensor_parallel/layers/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/cp_attention_testing.h"
#include "tensor_parallel/layers/internal/tp_testing.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using tp_layers_testing::AttentionReference;
using tp_layers_testing::ChunkRows;
using tp_layers_testing::DenseAttention;
using tp_layers_testing::ExpectAllOk;
using tp_layers_testing::ExpectClose;
using tp_layers_testing::GatherChunks;
using tp_layers_testing::kGradBound;
using tp_layers_testing::kOutputBound;
using tp_layers_testing::RandomValues;
using tp_layers_testing::RunTp;
using tp_layers_testing::ScatterChunks;

struct Case {
  int cp;
  CpLayout layout;
  bool causal;
  int64_t seq_len;
  int64_t d;
};

std::string NameOf(const Case& c) {
  return absl::StrCat("cp", c.cp, "_", CpLayoutName(c.layout), c.causal ? "_causal" : "_full", "_s",
                      c.seq_len, "_d", c.d);
}
void PrintTo(const Case& c, std::ostream* os) { *os << NameOf(c); }

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int cp : {1, 2, 3, 4}) {
    for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
      for (bool causal : {true, false}) {
        for (int64_t seq_len : {3, 37, 64, 100}) {
          cases.push_back(Case{cp, layout, causal, seq_len, seq_len == 64 ? 16 : 8});
        }
      }
    }
  }
  return cases;
}

// What each rank computed, gathered at global positions, and what it sent.
struct RingResult {
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<int64_t> forward_sent, backward_sent;  // elements, by rank
};

RingResult RunRing(const Case& c, const RingAttentionOptions& options, const std::vector<float>& q,
                   const std::vector<float>& k, const std::vector<float>& v,
                   const std::vector<float>& dout,
                   std::vector<RingAttentionBuffers>* buffers = nullptr) {
  const int64_t s = c.seq_len, d = c.d;
  RingResult result;
  result.out.assign(s * d, 0.0f);
  result.lse.assign(s, 0.0f);
  result.dq.assign(s * d, 0.0f);
  result.dk.assign(s * d, 0.0f);
  result.dv.assign(s * d, 0.0f);
  result.forward_sent.assign(c.cp, 0);
  result.backward_sent.assign(c.cp, 0);
  ExpectAllOk(RunTp(c.cp, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(const std::vector<PositionRange> chunks,
                          CpChunks(s, comm.size(), comm.rank(), c.layout));
    const int64_t rows = ChunkRows(chunks);
    const std::vector<float> lq = GatherChunks(q, chunks, d), lk = GatherChunks(k, chunks, d);
    const std::vector<float> lv = GatherChunks(v, chunks, d), ldout = GatherChunks(dout, chunks, d);
    // Seeded garbage in out: Forward must overwrite every row.
    std::vector<float> out = RandomValues(rows * d, 99), lse(static_cast<size_t>(rows), 7.0f);
    const auto sent = [&comm] {
      return static_cast<int64_t>(comm.Counters(CollectiveKind::kSendRecv).bytes_sent /
                                  sizeof(float));
    };
    RingAttentionBuffers* b = buffers != nullptr ? &(*buffers)[comm.rank()] : nullptr;
    const int64_t before = sent();
    LOOM_RETURN_IF_ERROR(
        RingAttentionForward(comm, Dense(lq, rows, d), Dense(lk, rows, d), Dense(lv, rows, d), s,
                             options, Dense(absl::MakeSpan(out), rows, d), absl::MakeSpan(lse), b));
    const int64_t after_forward = sent();
    std::vector<float> dq(out.size(), 0.0f), dk(out.size(), 0.0f), dv(out.size(), 0.0f);
    LOOM_RETURN_IF_ERROR(RingAttentionBackward(
        comm, Dense(lq, rows, d), Dense(lk, rows, d), Dense(lv, rows, d), s, options,
        Dense(out, rows, d), Dense(ldout, rows, d), lse, Dense(absl::MakeSpan(dq), rows, d),
        Dense(absl::MakeSpan(dk), rows, d), Dense(absl::MakeSpan(dv), rows, d), b));
    result.forward_sent[comm.rank()] = after_forward - before;
    result.backward_sent[comm.rank()] = sent() - after_forward;
    // Ranks write disjoint positions of the shared results.
    ScatterChunks(out, chunks, d, result.out);
    ScatterChunks(lse, chunks, 1, result.lse);
    ScatterChunks(dq, chunks, d, result.dq);
    ScatterChunks(dk, chunks, d, result.dk);
    ScatterChunks(dv, chunks, d, result.dv);
    return absl::OkStatus();
  }));
  return result;
}

class RingAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionTest, MatchesTheWholeSequenceReference) {
  const Case& c = GetParam();
  const int64_t s = c.seq_len, d = c.d;
  // Queries and keys spread wider than values, so the softmax is far from uniform.
  std::vector<float> q = RandomValues(s * d, 1), k = RandomValues(s * d, 2);
  for (float& x : q) x *= 1.5f;
  for (float& x : k) x *= 1.5f;
  const std::vector<float> v = RandomValues(s * d, 3), dout = RandomValues(s * d, 4);
  RingAttentionOptions options;
  options.layout = c.layout;
  options.causal = c.causal;
  options.tile_q = 16;  // blocks of up to 50 rows span several tiles
  options.tile_k = 16;
  const AttentionReference ref = DenseAttention(q, k, v, dout, s, d, c.causal);
  const RingResult got = RunRing(c, options, q, k, v, dout);

  ExpectClose(got.out, ref.out, "out", kOutputBound);
  ExpectClose(got.lse, ref.lse, "lse", kOutputBound);
  ExpectClose(got.dq, ref.dq, "dq", kGradBound);
  ExpectClose(got.dk, ref.dk, "dk", kGradBound);
  ExpectClose(got.dv, ref.dv, "dv", kGradBound);

  for (int rank = 0; rank < c.cp; ++rank) {
    LOOM_ASSERT_OK_AND_ASSIGN(const RingAttentionTraffic traffic,
                              RingAttentionSentElements(s, c.cp, rank, c.layout, d));
    EXPECT_EQ(got.forward_sent[rank], traffic.forward) << "rank " << rank;
    EXPECT_EQ(got.backward_sent[rank], traffic.backward) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RingAttentionTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& case_info) {
                           return NameOf(case_info.param);
                         });

// Finite differences of L = sum(out * W) against the ring's backward (dout = W), on
// cp 3 with a sequence of 10 (not a multiple of 2 cp: chunks of 2 and 1 rows), both
// layouts, for elements of q, k and v on every rank. The bound is the one
// ulysses_attention_test explains: |numeric - backward| <= 1e-2 max(|backward|, 1e-2)
// for central differences with step 1e-2 on f32 outputs summed in double; a lost or
// misplaced dK/dV share is off by the size of the gradient itself.
TEST(RingAttentionCallTest, GradientsMatchFiniteDifferences) {
  for (const CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
    SCOPED_TRACE(std::string(CpLayoutName(layout)));
    const Case c{3, layout, true, 10, 4};
    const int64_t s = c.seq_len, d = c.d;
    RingAttentionOptions options;
    options.layout = c.layout;
    options.causal = c.causal;
    std::vector<float> q = RandomValues(s * d, 61), k = RandomValues(s * d, 62);
    const std::vector<float> v = RandomValues(s * d, 63), w = RandomValues(s * d, 64);
    const RingResult analytic = RunRing(c, options, q, k, v, w);
    const auto loss = [&](const std::vector<float>& xq, const std::vector<float>& xk,
                          const std::vector<float>& xv) {
      const RingResult r = RunRing(c, options, xq, xk, xv, w);
      double sum = 0;
      for (size_t i = 0; i < r.out.size(); ++i) {
        sum += static_cast<double>(r.out[i]) * static_cast<double>(w[i]);
      }
      return sum;
    };
    constexpr float kStep = 1e-2f;
    for (int input = 0; input < 3; ++input) {
      for (const int64_t position : {0, 3, 5, 9}) {  // every rank, in both layouts
        const size_t at = static_cast<size_t>(position * d + (position + input) % d);
        std::vector<float> plus[3] = {q, k, v}, minus[3] = {q, k, v};
        plus[input][at] += kStep;
        minus[input][at] -= kStep;
        const double step = static_cast<double>(plus[input][at]) -
                            static_cast<double>(minus[input][at]);  // 2 h as stored
        const double numeric =
            (loss(plus[0], plus[1], plus[2]) - loss(minus[0], minus[1], minus[2])) / step;
        const std::vector<float>* grads[3] = {&analytic.dq, &analytic.dk, &analytic.dv};
        const double exact = static_cast<double>((*grads[input])[at]);
        EXPECT_LE(std::abs(numeric - exact), 1e-2 * std::max(std::abs(exact), 1e-2))
            << "qkv"[input] << " at position " << position << ": numeric " << numeric
            << ", backward " << exact;
      }
    }
  }
}

TEST(RingAttentionTrafficTest, DivisibleSequencesSendTheFormula) {
  // seq 64 divides into 2 cp chunks for cp = 1, 2, 4: every block has 64 / cp rows.
  for (int cp : {1, 2, 4}) {
    for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
      const int64_t rows = 64 / cp, d = 16;
      for (int rank = 0; rank < cp; ++rank) {
        LOOM_ASSERT_OK_AND_ASSIGN(const RingAttentionTraffic traffic,
                                  RingAttentionSentElements(64, cp, rank, layout, d));
        EXPECT_EQ(traffic.forward, 2 * (cp - 1) * rows * d);
        EXPECT_EQ(traffic.backward, cp == 1 ? 0 : (4 * (cp - 1) + 2) * rows * d);
      }
    }
  }
  EXPECT_THAT(RingAttentionSentElements(64, 4, 0, CpLayout::kZigzag, -1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("d is -1")));
}

TEST(CpChunksTest, EveryPositionOnceAndChunkSizesWithinOne) {
  for (int cp = 1; cp <= 5; ++cp) {
    for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
      for (int64_t s : {0, 1, 3, 37, 64, 100}) {
        const std::string what = absl::StrCat(CpLayoutName(layout), " cp ", cp, " s ", s);
        std::vector<int> seen(static_cast<size_t>(s), 0);
        int64_t shortest = s, longest = 0;
        for (int rank = 0; rank < cp; ++rank) {
          LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<PositionRange> chunks,
                                    CpChunks(s, cp, rank, layout));
          ASSERT_EQ(chunks.size(), layout == CpLayout::kZigzag ? 2u : 1u) << what;
          for (const PositionRange& c : chunks) {
            shortest = std::min(shortest, c.length);
            longest = std::max(longest, c.length);
            for (int64_t p = c.offset; p < c.offset + c.length; ++p) ++seen[p];
          }
        }
        EXPECT_THAT(seen, ::testing::Each(1)) << what;
        EXPECT_LE(longest - shortest, 1) << what;
      }
    }
  }
  LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<PositionRange> chunks,
                            CpChunks(100, 4, 1, CpLayout::kZigzag));
  EXPECT_EQ(chunks[0].offset, 13);
  EXPECT_EQ(chunks[0].length, 13);
  EXPECT_EQ(chunks[1].offset, 76);
  EXPECT_EQ(chunks[1].length, 12);
}

TEST(CpChunksTest, ZigzagBalancesCausalWorkAndContiguousDoesNot) {
  std::vector<int64_t> zigzag, contiguous;
  for (int rank = 0; rank < 4; ++rank) {
    LOOM_ASSERT_OK_AND_ASSIGN(const int64_t z, CpVisiblePairs(64, 4, rank, CpLayout::kZigzag));
    LOOM_ASSERT_OK_AND_ASSIGN(const int64_t c,
                              CpVisiblePairs(64, 4, rank, CpLayout::kContiguous));
    zigzag.push_back(z);
    contiguous.push_back(c);
  }
  EXPECT_EQ(zigzag, std::vector<int64_t>(4, 520));
  EXPECT_EQ(contiguous, (std::vector<int64_t>{136, 392, 648, 904}));
  // Every pair of the causal triangle once: 64 * 65 / 2.
  EXPECT_EQ(zigzag[0] * 4, 2080);
  EXPECT_THAT(CpWorkImbalance(64, 4, CpLayout::kZigzag), IsOkAndHolds(1.0));
  EXPECT_THAT(CpWorkImbalance(64, 4, CpLayout::kContiguous), IsOkAndHolds(904.0 / 520.0));
  // The bound, max / mean at most 1.02 with zigzag, on sequences whose chunks
  // are more than a few rows (uneven lengths included); contiguous near 2 cp / (cp + 1).
  for (int64_t seq_len : {250, 1000, 1024, 4096}) {
    for (int cp : {2, 3, 4}) {
      LOOM_ASSERT_OK_AND_ASSIGN(const double z, CpWorkImbalance(seq_len, cp, CpLayout::kZigzag));
      LOOM_ASSERT_OK_AND_ASSIGN(const double c,
                                CpWorkImbalance(seq_len, cp, CpLayout::kContiguous));
      EXPECT_LE(z, 1.02) << "seq " << seq_len << " cp " << cp;
      EXPECT_GT(c, 1.45) << "seq " << seq_len << " cp " << cp;
    }
  }
  // Without a mask every query sees every key.
  EXPECT_THAT(CpVisiblePairs(100, 4, 1, CpLayout::kZigzag, /*causal=*/false),
              IsOkAndHolds(25 * 100));
  EXPECT_THAT(CpVisiblePairs(100, 0, 0, CpLayout::kZigzag).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cp is 0")));
}

TEST(CpChunksTest, BadArgumentsNameTheValues) {
  EXPECT_THAT(
      CpChunks(100, 0, 0, CpLayout::kZigzag).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("CpChunks: cp is 0 (seq_len 100, rank 0): it must be at least 1")));
  EXPECT_THAT(CpChunks(-3, 2, 0, CpLayout::kContiguous).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seq_len is -3 (cp 2")));
  EXPECT_THAT(CpChunks(10, 4, 4, CpLayout::kZigzag).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank is 4 but cp is 4: it must be in [0, 4)")));
  EXPECT_THAT(CpChunks(10, 4, -1, CpLayout::kZigzag).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank is -1")));
}

TEST(RingAttentionCallTest, WrongShapesNameThem) {
  const std::vector<float> x(40, 0.5f);
  std::vector<float> out(40), lse(10);
  ExpectAllOk(RunTp(1, [&](Communicator& comm) -> absl::Status {
    // Rank 0 of 1 holds all 10 positions; 9 rows of q is wrong.
    EXPECT_THAT(RingAttentionForward(comm, Dense(x, 9, 4), Dense(x, 10, 4), Dense(x, 10, 4), 10, {},
                                     Dense(absl::MakeSpan(out), 10, 4), absl::MakeSpan(lse)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("q is [9,4] but rank 0 of 1 holds [10,4]")));
    EXPECT_THAT(
        RingAttentionForward(comm, Dense(x, 10, 4), Dense(x, 10, 4), Dense(x, 10, 4), 10, {},
                             Dense(absl::MakeSpan(out), 10, 4), absl::MakeSpan(lse).subspan(1)),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lse has 9 values")));
    EXPECT_THAT(RingAttentionForward(comm, Dense(x, 10, 4), Dense(x, 10, 4), Dense(x, 10, 4), -1,
                                     {}, Dense(absl::MakeSpan(out), 10, 4), absl::MakeSpan(lse)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seq_len is -1")));
    return absl::OkStatus();
  }));
}

// Buffers kept across calls of different shapes give what fresh ones give, bit for
// bit: nothing left over from an earlier call (a larger block, its gradients) leaks in.
TEST(RingAttentionCallTest, BuffersKeptAcrossCallsGiveTheSameBits) {
  std::vector<RingAttentionBuffers> buffers(3);
  for (const Case& c :
       {Case{3, CpLayout::kZigzag, true, 100, 16}, Case{3, CpLayout::kContiguous, false, 37, 8},
        Case{3, CpLayout::kZigzag, true, 64, 8}}) {
    const int64_t n = c.seq_len * c.d;
    const std::vector<float> q = RandomValues(n, 31), k = RandomValues(n, 32);
    const std::vector<float> v = RandomValues(n, 33), dout = RandomValues(n, 34);
    RingAttentionOptions options;
    options.layout = c.layout;
    options.causal = c.causal;
    const RingResult fresh = RunRing(c, options, q, k, v, dout);
    const RingResult kept = RunRing(c, options, q, k, v, dout, &buffers);
    EXPECT_EQ(kept.out, fresh.out) << NameOf(c);
    EXPECT_EQ(kept.lse, fresh.lse) << NameOf(c);
    EXPECT_EQ(kept.dq, fresh.dq) << NameOf(c);
    EXPECT_EQ(kept.dk, fresh.dk) << NameOf(c);
    EXPECT_EQ(kept.dv, fresh.dv) << NameOf(c);
  }
}

// The hops run on a communication thread: every forward and backward call counts its
// hops in the buffers' overlap figures (forward cp - 1; backward cp - 1 of keys and
// values, gradient sums one behind, and the sums home: cp jobs of the thread, plus
// the last), with the thread's time in them and what the caller waited of it.
TEST(RingAttentionCallTest, OverlapFiguresCountEveryHop) {
  for (int cp : {1, 2, 4}) {
    std::vector<RingAttentionBuffers> buffers(static_cast<size_t>(cp));
    const Case c{cp, CpLayout::kZigzag, true, 64, 8};
    const int64_t n = c.seq_len * c.d;
    const std::vector<float> q = RandomValues(n, 41), k = RandomValues(n, 42);
    const std::vector<float> v = RandomValues(n, 43), dout = RandomValues(n, 44);
    RingAttentionOptions options;
    RunRing(c, options, q, k, v, dout, &buffers);
    for (const RingAttentionBuffers& b : buffers) {
      const RingOverlapStats& stats = b.stats();
      EXPECT_EQ(stats.hops, cp == 1 ? 0 : (cp - 1) + cp + 1) << "cp " << cp;
      if (cp > 1) {
        EXPECT_GT(stats.hop_seconds, 0.0);
        EXPECT_GE(stats.exposed_seconds, 0.0);
      }
    }
    buffers[0].ResetStats();
    EXPECT_EQ(buffers[0].stats().hops, 0);
  }
}

// What one rank computed for several heads stored side by side, [rows, heads * d]
// (the attention layer's layout), and the send and receive calls it made.
struct MultiHeadResult {
  std::vector<float> out, lse, dq, dk, dv;  // rank-major, then the rank's own layout
  uint64_t calls = 0;
};

// RunHeads runs `heads` heads of a sequence on cp thread ranks, either in one
// multi-head call each way (together) or one call per head.
std::vector<MultiHeadResult> RunHeads(const Case& c, int64_t heads, bool together,
                                      const RingAttentionOptions& options) {
  const int64_t s = c.seq_len, d = c.d, width = heads * d;
  const std::vector<float> q = RandomValues(s * width, 41), k = RandomValues(s * width, 42);
  const std::vector<float> v = RandomValues(s * width, 43), dout = RandomValues(s * width, 44);
  std::vector<MultiHeadResult> results(c.cp);
  ExpectAllOk(RunTp(c.cp, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(const std::vector<PositionRange> chunks,
                          CpChunks(s, comm.size(), comm.rank(), c.layout));
    const int64_t rows = ChunkRows(chunks);
    const std::vector<float> lq = GatherChunks(q, chunks, width);
    const std::vector<float> lk = GatherChunks(k, chunks, width);
    const std::vector<float> lv = GatherChunks(v, chunks, width);
    const std::vector<float> ldout = GatherChunks(dout, chunks, width);
    MultiHeadResult& r = results[comm.rank()];
    r.out.assign(rows * width, 0.0f);
    r.lse.assign(rows * heads, 0.0f);
    r.dq.assign(rows * width, 0.0f);
    r.dk.assign(rows * width, 0.0f);
    r.dv.assign(rows * width, 0.0f);
    const auto view = [&](std::vector<float>& m, int64_t h) {
      return MatrixView{absl::MakeSpan(m).subspan(h * d), rows, d, width};
    };
    const auto cview = [&](const std::vector<float>& m, int64_t h) {
      return ConstMatrixView{absl::MakeConstSpan(m).subspan(h * d), rows, d, width};
    };
    std::vector<RingAttentionHead> forward;
    std::vector<RingAttentionHeadGrad> backward;
    for (int64_t h = 0; h < heads; ++h) {
      const absl::Span<float> lse = absl::MakeSpan(r.lse).subspan(h * rows, rows);
      forward.push_back({cview(lq, h), cview(lk, h), cview(lv, h), view(r.out, h), lse});
      backward.push_back({cview(lq, h), cview(lk, h), cview(lv, h), cview(r.out, h),
                          cview(ldout, h), lse, view(r.dq, h), view(r.dk, h), view(r.dv, h)});
    }
    const uint64_t before = comm.Counters(CollectiveKind::kSendRecv).calls;
    if (together) {
      LOOM_RETURN_IF_ERROR(RingAttentionForward(comm, forward, s, options));
      LOOM_RETURN_IF_ERROR(RingAttentionBackward(comm, backward, s, options));
    } else {
      for (int64_t h = 0; h < heads; ++h) {
        LOOM_RETURN_IF_ERROR(
            RingAttentionForward(comm, absl::MakeConstSpan(&forward[h], 1), s, options));
      }
      for (int64_t h = 0; h < heads; ++h) {
        LOOM_RETURN_IF_ERROR(
            RingAttentionBackward(comm, absl::MakeConstSpan(&backward[h], 1), s, options));
      }
    }
    r.calls = comm.Counters(CollectiveKind::kSendRecv).calls - before;
    return absl::OkStatus();
  }));
  return results;
}

// Heads in one call compute what each head alone computes, bit for bit, at any thread
// count, in the messages of one head (every head's block in each).
TEST(RingAttentionCallTest, HeadsTogetherEqualEachHeadAloneInOneHeadsMessages) {
  const int64_t heads = 3;
  for (const Case& c :
       {Case{3, CpLayout::kZigzag, true, 37, 8}, Case{4, CpLayout::kContiguous, false, 64, 8},
        Case{2, CpLayout::kZigzag, true, 3, 8}}) {
    RingAttentionOptions options;
    options.layout = c.layout;
    options.causal = c.causal;
    options.tile_q = 16;
    options.tile_k = 16;
    const std::vector<MultiHeadResult> alone = RunHeads(c, heads, false, options);
    for (int threads : {1, 3}) {
      LOOM_ASSERT_OK(SetGemmThreads(threads));
      const std::vector<MultiHeadResult> together = RunHeads(c, heads, true, options);
      for (int rank = 0; rank < c.cp; ++rank) {
        const std::string what = absl::StrCat(NameOf(c), " threads ", threads, " rank ", rank);
        EXPECT_EQ(together[rank].out, alone[rank].out) << what;
        EXPECT_EQ(together[rank].lse, alone[rank].lse) << what;
        EXPECT_EQ(together[rank].dq, alone[rank].dq) << what;
        EXPECT_EQ(together[rank].dk, alone[rank].dk) << what;
        EXPECT_EQ(together[rank].dv, alone[rank].dv) << what;
        EXPECT_EQ(together[rank].calls * heads, alone[rank].calls) << what;
      }
    }
    LOOM_ASSERT_OK(SetGemmThreads(1));
  }
}

// A multi-head call names the head whose view is wrong.
TEST(RingAttentionCallTest, WrongHeadIsNamed) {
  ExpectAllOk(RunTp(2, [](Communicator& comm) -> absl::Status {
    const int64_t rows = 5, d = 4;  // seq 10 on 2 ranks
    std::vector<float> x(rows * d, 0.0f), lse(rows), small(rows * 2, 0.0f);
    const ConstMatrixView m = Dense(x, rows, d);
    const MatrixView o = Dense(absl::MakeSpan(x), rows, d);
    const std::vector<RingAttentionHead> heads = {
        {m, m, m, o, absl::MakeSpan(lse)},
        {m, Dense(small, rows, 2), m, o, absl::MakeSpan(lse)}};
    const absl::Status status = RingAttentionForward(comm, heads, 10, {});
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("k (head 1) is [5,2] but rank")))
        << status;
    return absl::OkStatus();
  }));
}

// cp = 1 is one flash attention call over the whole sequence: the same bits.
TEST(RingAttentionCallTest, OneRankIsPlainFlashAttentionBitForBit) {
  const int64_t s = 37, d = 8;
  const std::vector<float> q = RandomValues(s * d, 21), k = RandomValues(s * d, 22);
  const std::vector<float> v = RandomValues(s * d, 23), dout = RandomValues(s * d, 24);
  for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
    for (bool causal : {true, false}) {
      RingAttentionOptions options;
      options.layout = layout;
      options.causal = causal;
      FlashAttentionOptions flash;
      flash.causal = causal;
      std::vector<float> out(s * d), lse(s), dq(s * d, 0.0f), dk(s * d, 0.0f), dv(s * d, 0.0f);
      const AttentionBlock block{Dense(q, s, d), Dense(k, s, d), Dense(v, s, d)};
      LOOM_ASSERT_OK(FlashAttentionForward(block, Dense(absl::MakeSpan(out), s, d),
                                           absl::MakeSpan(lse), flash));
      LOOM_ASSERT_OK(FlashAttentionBackward(
          block, Dense(out, s, d), Dense(dout, s, d), lse, Dense(absl::MakeSpan(dq), s, d),
          Dense(absl::MakeSpan(dk), s, d), Dense(absl::MakeSpan(dv), s, d), flash));
      const RingResult ring = RunRing(Case{1, layout, causal, s, d}, options, q, k, v, dout);
      const std::string what = absl::StrCat(CpLayoutName(layout), causal ? " causal" : " full");
      EXPECT_EQ(ring.out, out) << what;
      EXPECT_EQ(ring.lse, lse) << what;
      EXPECT_EQ(ring.dq, dq) << what;
      EXPECT_EQ(ring.dk, dk) << what;
      EXPECT_EQ(ring.dv, dv) << what;
    }
  }
}

}  // namespace
}  // namespace loom
