// UlyssesAttentionForward / Backward on cp = 1..4 thread ranks against the
// double-precision attention of the whole sequence that ring_attention_test uses
// (internal/cp_attention_testing.h), per head: both layouts, causal and full masks,
// sequence lengths that do and do not divide into the chunks (0; 3: ranks with
// nothing; 37, 100: chunks a row apart), heads = 2 cp and 12, the heads' columns of one
// [rows, heads * d] matrix as the attention layer holds them (strided views). Also:
// each rank's sent elements against UlyssesAttentionSentElements and the all-to-all
// counters, the same bits run to run, with kept buffers and at any thread count,
// cp = 1 against plain flash attention bit for bit, finite differences of the
// gradients, and bad input.
#include "tensor_parallel/layers/ulysses_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "core/buffer_view.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/cp_attention_testing.h"
#include "tensor_parallel/layers/internal/tp_testing.h"
#include "tensor_parallel/layers/ring_attention.h"

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
  int64_t heads;
  CpLayout layout;
  bool causal;
  int64_t seq_len;
  int64_t d;
};

std::string NameOf(const Case& c) {
  return absl::StrCat("cp", c.cp, "_h", c.heads, "_", CpLayoutName(c.layout),
                      c.causal ? "_causal" : "_full", "_s", c.seq_len, "_d", c.d);
}
void PrintTo(const Case& c, std::ostream* os) { *os << NameOf(c); }

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int cp : {1, 2, 3, 4}) {
    for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
      for (bool causal : {true, false}) {
        for (int64_t seq_len : {0, 3, 37, 64, 100}) {
          const int64_t heads = seq_len == 37 ? 12 : 2 * cp;
          cases.push_back(Case{cp, heads, layout, causal, seq_len, seq_len == 64 ? 16 : 8});
        }
      }
    }
  }
  return cases;
}

// The whole sequence of every head side by side, [s, heads * d].
struct Inputs {
  std::vector<float> q, k, v, dout;
};

Inputs MakeInputs(const Case& c, uint32_t seed) {
  const int64_t n = c.seq_len * c.heads * c.d;
  Inputs in{RandomValues(n, seed), RandomValues(n, seed + 1), RandomValues(n, seed + 2),
            RandomValues(n, seed + 3)};
  // Queries and keys spread wider than values, so the softmax is far from uniform.
  for (float& x : in.q) x *= 1.5f;
  for (float& x : in.k) x *= 1.5f;
  return in;
}

RingAttentionOptions OptionsOf(const Case& c) {
  RingAttentionOptions options;
  options.layout = c.layout;
  options.causal = c.causal;
  options.tile_q = 16;  // a whole sequence of up to 100 rows spans several tiles
  options.tile_k = 16;
  return options;
}

// HeadOf returns head h's columns [s, d] of a [s, heads * d] matrix.
std::vector<float> HeadOf(const std::vector<float>& m, int64_t heads, int64_t d, int64_t h) {
  const int64_t s = static_cast<int64_t>(m.size()) / (heads * d);
  std::vector<float> head;
  for (int64_t i = 0; i < s; ++i) {
    const auto row = m.begin() + i * heads * d + h * d;
    head.insert(head.end(), row, row + d);
  }
  return head;
}

// What the ranks computed, gathered at global positions, and what each sent.
struct UlyssesResult {
  std::vector<float> out, dq, dk, dv;                   // [s, heads * d]
  std::vector<std::vector<float>> lse;                  // by head, [s]
  std::vector<int64_t> forward_sent, backward_sent;     // elements, by rank
  std::vector<uint64_t> forward_calls, backward_calls;  // all_to_allv calls, by rank
  std::vector<uint64_t> other_calls;                    // any other collective, by rank
};

UlyssesResult RunUlysses(const Case& c, const RingAttentionOptions& options, const Inputs& in,
                         std::vector<UlyssesAttentionBuffers>* buffers = nullptr) {
  const int64_t s = c.seq_len, d = c.d, heads = c.heads, width = heads * d;
  UlyssesResult result;
  result.out.assign(s * width, 0.0f);
  result.dq = result.dk = result.dv = result.out;
  result.lse.assign(heads, std::vector<float>(s, 0.0f));
  result.forward_sent.assign(c.cp, 0);
  result.backward_sent.assign(c.cp, 0);
  result.forward_calls.assign(c.cp, 0);
  result.backward_calls.assign(c.cp, 0);
  result.other_calls.assign(c.cp, 0);
  ExpectAllOk(RunTp(c.cp, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(const std::vector<PositionRange> chunks,
                          CpChunks(s, comm.size(), comm.rank(), c.layout));
    const int64_t rows = ChunkRows(chunks);
    const std::vector<float> lq = GatherChunks(in.q, chunks, width);
    const std::vector<float> lk = GatherChunks(in.k, chunks, width);
    const std::vector<float> lv = GatherChunks(in.v, chunks, width);
    const std::vector<float> ldout = GatherChunks(in.dout, chunks, width);
    // Seeded garbage in out and lse: Forward must overwrite every row.
    std::vector<float> out = RandomValues(rows * width, 99), lse(heads * rows, 7.0f);
    std::vector<float> dq(out.size(), 0.0f), dk(out.size(), 0.0f), dv(out.size(), 0.0f);
    // Head h's columns of a rank's [rows, width] matrix (no data at all on a rank
    // without rows).
    const auto view = [&](std::vector<float>& m, int64_t h) {
      return MatrixView{rows == 0 ? absl::Span<float>() : absl::MakeSpan(m).subspan(h * d), rows, d,
                        width};
    };
    const auto cview = [&](const std::vector<float>& m, int64_t h) {
      return ConstMatrixView{
          rows == 0 ? absl::Span<const float>() : absl::MakeSpan(m).subspan(h * d), rows, d, width};
    };
    std::vector<RingAttentionHead> forward;
    std::vector<RingAttentionHeadGrad> backward;
    for (int64_t h = 0; h < heads; ++h) {
      const absl::Span<float> l = absl::MakeSpan(lse).subspan(h * rows, rows);
      forward.push_back({cview(lq, h), cview(lk, h), cview(lv, h), view(out, h), l});
      backward.push_back({cview(lq, h), cview(lk, h), cview(lv, h), cview(out, h), cview(ldout, h),
                          l, view(dq, h), view(dk, h), view(dv, h)});
    }
    const auto a2a = [&comm] { return comm.Counters(CollectiveKind::kAllToAllV); };
    const auto others = [&comm] {
      uint64_t calls = 0;
      for (CollectiveKind kind : AllCollectiveKinds()) {
        if (kind != CollectiveKind::kAllToAllV) calls += comm.Counters(kind).calls;
      }
      return calls;
    };
    UlyssesAttentionBuffers* b = buffers != nullptr ? &(*buffers)[comm.rank()] : nullptr;
    const CollectiveCounters before = a2a();
    const uint64_t others_before = others();
    LOOM_RETURN_IF_ERROR(UlyssesAttentionForward(comm, forward, s, options, b));
    const CollectiveCounters after_forward = a2a();
    LOOM_RETURN_IF_ERROR(UlyssesAttentionBackward(comm, backward, s, options, b));
    const CollectiveCounters after = a2a();
    const int r = comm.rank();
    result.forward_sent[r] =
        static_cast<int64_t>((after_forward.bytes_sent - before.bytes_sent) / sizeof(float));
    result.backward_sent[r] =
        static_cast<int64_t>((after.bytes_sent - after_forward.bytes_sent) / sizeof(float));
    result.forward_calls[r] = after_forward.calls - before.calls;
    result.backward_calls[r] = after.calls - after_forward.calls;
    result.other_calls[r] = others() - others_before;
    // Ranks write disjoint positions of the shared results.
    ScatterChunks(out, chunks, width, result.out);
    ScatterChunks(dq, chunks, width, result.dq);
    ScatterChunks(dk, chunks, width, result.dk);
    ScatterChunks(dv, chunks, width, result.dv);
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<float> head_lse(lse.begin() + h * rows, lse.begin() + (h + 1) * rows);
      ScatterChunks(head_lse, chunks, 1, result.lse[h]);
    }
    return absl::OkStatus();
  }));
  return result;
}

void ExpectSameBits(const UlyssesResult& got, const UlyssesResult& want, const std::string& what) {
  EXPECT_EQ(got.out, want.out) << what;
  EXPECT_EQ(got.lse, want.lse) << what;
  EXPECT_EQ(got.dq, want.dq) << what;
  EXPECT_EQ(got.dk, want.dk) << what;
  EXPECT_EQ(got.dv, want.dv) << what;
}

class UlyssesAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(UlyssesAttentionTest, MatchesTheWholeSequenceReference) {
  const Case& c = GetParam();
  const int64_t s = c.seq_len, d = c.d;
  const Inputs in = MakeInputs(c, 1);
  const UlyssesResult got = RunUlysses(c, OptionsOf(c), in);

  for (int64_t h = 0; h < c.heads; ++h) {
    const auto head = [&](const std::vector<float>& m) { return HeadOf(m, c.heads, d, h); };
    const AttentionReference ref =
        DenseAttention(head(in.q), head(in.k), head(in.v), head(in.dout), s, d, c.causal);
    const std::string what = absl::StrCat(" of head ", h);
    ExpectClose(head(got.out), ref.out, "out" + what, kOutputBound);
    ExpectClose(got.lse[h], ref.lse, "lse" + what, kOutputBound);
    ExpectClose(head(got.dq), ref.dq, "dq" + what, kGradBound);
    ExpectClose(head(got.dk), ref.dk, "dk" + what, kGradBound);
    ExpectClose(head(got.dv), ref.dv, "dv" + what, kGradBound);
  }

  for (int rank = 0; rank < c.cp; ++rank) {
    LOOM_ASSERT_OK_AND_ASSIGN(const UlyssesAttentionTraffic traffic,
                              UlyssesAttentionSentElements(s, c.cp, rank, c.layout, c.heads, d));
    EXPECT_EQ(got.forward_sent[rank], traffic.forward) << "rank " << rank;
    EXPECT_EQ(got.backward_sent[rank], traffic.backward) << "rank " << rank;
    // One all-to-all out to the head groups and one home, each way; nothing else.
    EXPECT_EQ(got.forward_calls[rank], 2u) << "rank " << rank;
    EXPECT_EQ(got.backward_calls[rank], 2u) << "rank " << rank;
    EXPECT_EQ(got.other_calls[rank], 0u) << "rank " << rank;
  }

  ExpectSameBits(RunUlysses(c, OptionsOf(c), in), got, "second run");
}

INSTANTIATE_TEST_SUITE_P(Cases, UlyssesAttentionTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& case_info) {
                           return NameOf(case_info.param);
                         });

// The all-to-all counters count what goes to other ranks only: a rank's block to
// itself is a local copy. The traffic formula relies on it.
TEST(UlyssesAttentionTrafficTest, AllToAllCountersLeaveOutTheBlockToItself) {
  for (int cp : {1, 2, 3}) {
    ExpectAllOk(RunTp(cp, [cp](Communicator& comm) -> absl::Status {
      // Rank r sends r + j + 1 floats to rank j.
      std::vector<size_t> send_counts, recv_counts;
      size_t to_others = 0;
      for (int j = 0; j < cp; ++j) {
        send_counts.push_back(static_cast<size_t>(comm.rank() + j + 1));
        recv_counts.push_back(static_cast<size_t>(j + comm.rank() + 1));
        if (j != comm.rank()) to_others += send_counts.back();
      }
      std::vector<float> send(std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}));
      std::vector<float> recv(std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}));
      LOOM_RETURN_IF_ERROR(comm.AllToAllV(ConstBufferView::Of(absl::MakeConstSpan(send)),
                                          send_counts, BufferView::Of(absl::MakeSpan(recv)),
                                          recv_counts));
      EXPECT_EQ(comm.Counters(CollectiveKind::kAllToAllV).bytes_sent, to_others * sizeof(float))
          << "cp " << cp << " rank " << comm.rank();
      return absl::OkStatus();
    }));
  }
}

TEST(UlyssesAttentionTrafficTest, TheHeaderExampleAndTheEvenFormula) {
  // The header's example: seq 100, cp 4, rank 1 (25 rows), 8 heads of d = 16.
  LOOM_ASSERT_OK_AND_ASSIGN(const UlyssesAttentionTraffic ulysses,
                            UlyssesAttentionSentElements(100, 4, 1, CpLayout::kZigzag, 8, 16));
  EXPECT_EQ(ulysses.forward, 9750);
  EXPECT_EQ(ulysses.backward, 19350);
  LOOM_ASSERT_OK_AND_ASSIGN(const RingAttentionTraffic ring,
                            RingAttentionSentElements(100, 4, 1, CpLayout::kZigzag, 16));
  EXPECT_EQ(8 * ring.forward, 19200);
  EXPECT_EQ(8 * ring.backward, 44800);
  // seq 64 divides into 2 cp chunks for cp = 1, 2, 4: every rank has 64 / cp rows.
  for (int cp : {1, 2, 4}) {
    for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
      const int64_t rows = 64 / cp, d = 16, heads = 4 * cp;
      for (int rank = 0; rank < cp; ++rank) {
        LOOM_ASSERT_OK_AND_ASSIGN(const UlyssesAttentionTraffic traffic,
                                  UlyssesAttentionSentElements(64, cp, rank, layout, heads, d));
        EXPECT_EQ(traffic.forward, heads * (cp - 1) / cp * rows * (4 * d + 1));
        EXPECT_EQ(traffic.backward, heads * (cp - 1) / cp * rows * (8 * d + 1));
      }
    }
  }
  EXPECT_THAT(UlyssesAttentionSentElements(64, 4, 0, CpLayout::kZigzag, 8, -1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("d is -1")));
  EXPECT_THAT(
      UlyssesAttentionSentElements(64, 4, 0, CpLayout::kZigzag, 6, 16).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("6 heads do not divide over cp 4")));
  EXPECT_THAT(UlyssesAttentionSentElements(64, 4, 4, CpLayout::kZigzag, 8, 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank is 4 but cp is 4")));
}

// cp = 1 is one flash attention call over the whole sequence per head: the same bits.
TEST(UlyssesAttentionCallTest, OneRankIsPlainFlashAttentionBitForBit) {
  for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
    for (bool causal : {true, false}) {
      const Case c{1, 3, layout, causal, 37, 8};
      const int64_t s = c.seq_len, d = c.d;
      const Inputs in = MakeInputs(c, 21);
      RingAttentionOptions options;  // default tiles, as FlashAttentionOptions'
      options.layout = layout;
      options.causal = causal;
      const UlyssesResult got = RunUlysses(c, options, in);
      FlashAttentionOptions flash;
      flash.causal = causal;
      for (int64_t h = 0; h < c.heads; ++h) {
        const auto head = [&](const std::vector<float>& m) { return HeadOf(m, c.heads, d, h); };
        const std::vector<float> q = head(in.q), k = head(in.k), v = head(in.v);
        const std::vector<float> dout = head(in.dout);
        std::vector<float> out(s * d), lse(s), dq(s * d, 0.0f), dk(s * d, 0.0f), dv(s * d, 0.0f);
        const AttentionBlock block{Dense(q, s, d), Dense(k, s, d), Dense(v, s, d), 0, 0};
        LOOM_ASSERT_OK(FlashAttentionForward(block, Dense(absl::MakeSpan(out), s, d),
                                             absl::MakeSpan(lse), flash));
        LOOM_ASSERT_OK(FlashAttentionBackward(
            block, Dense(out, s, d), Dense(dout, s, d), lse, Dense(absl::MakeSpan(dq), s, d),
            Dense(absl::MakeSpan(dk), s, d), Dense(absl::MakeSpan(dv), s, d), flash));
        const std::string what = absl::StrCat(NameOf(c), " head ", h);
        EXPECT_EQ(head(got.out), out) << what;
        EXPECT_EQ(got.lse[h], lse) << what;
        EXPECT_EQ(head(got.dq), dq) << what;
        EXPECT_EQ(head(got.dk), dk) << what;
        EXPECT_EQ(head(got.dv), dv) << what;
      }
    }
  }
}

// Buffers kept across calls of different shapes give what fresh ones give, bit for
// bit, and so do 1 and 3 threads per rank (each head on one thread).
TEST(UlyssesAttentionCallTest, KeptBuffersAndThreadCountsGiveTheSameBits) {
  std::vector<UlyssesAttentionBuffers> buffers(3);
  for (const Case& c : {Case{3, 6, CpLayout::kZigzag, true, 100, 16},
                        Case{3, 3, CpLayout::kContiguous, false, 37, 8},
                        Case{3, 12, CpLayout::kZigzag, true, 64, 8}}) {
    const Inputs in = MakeInputs(c, 31);
    const UlyssesResult fresh = RunUlysses(c, OptionsOf(c), in);
    ExpectSameBits(RunUlysses(c, OptionsOf(c), in, &buffers), fresh, NameOf(c) + " kept");
    LOOM_ASSERT_OK(SetGemmThreads(3));
    ExpectSameBits(RunUlysses(c, OptionsOf(c), in), fresh, NameOf(c) + " 3 threads");
    LOOM_ASSERT_OK(SetGemmThreads(1));
  }
}

// Finite differences of L = sum(out * W) against the backward's gradients (dout = W),
// for elements of q, k and v at positions on both ranks and in both zigzag chunks.
//
// Bound: |numeric - backward| <= 1e-2 max(|backward|, 1e-2). Central differences with
// step h = 1e-2 err by h^2 / 6 times a third derivative, which for scores of order 1 is
// of order 1: ~2e-5. L sums 80 f32 outputs, each within ~1e-7 of exact, in double; their
// rounding, divided by 2 h, adds ~sqrt(80) 1e-7 / 2e-2 ~ 5e-5 if the errors were
// independent (they mostly repeat between the two runs: the differences seen are
// 1e-7 to 3e-6). So 1e-2 relative, with an absolute floor of 1e-4 for the smallest
// gradients (0.002 here), holds with margin, while a wrong term (a head group's or a
// row's gradient lost or misplaced) is off by the size of the gradient itself.
TEST(UlyssesAttentionCallTest, GradientsMatchFiniteDifferences) {
  const Case c{2, 2, CpLayout::kZigzag, true, 10, 4};
  const int64_t width = c.heads * c.d;
  const RingAttentionOptions options = OptionsOf(c);
  Inputs in = MakeInputs(c, 51);
  in.dout = RandomValues(c.seq_len * width, 55);  // W
  const UlyssesResult analytic = RunUlysses(c, options, in);
  const auto loss = [&](const Inputs& x) {
    const UlyssesResult r = RunUlysses(c, options, x);
    double sum = 0;
    for (size_t i = 0; i < r.out.size(); ++i) {
      sum += static_cast<double>(r.out[i]) * static_cast<double>(x.dout[i]);
    }
    return sum;
  };
  // Positions 0-2 and 8-9 are rank 0's, 3-7 rank 1's (chunks of 3, 3, 2, 2).
  struct Element {
    std::vector<float> Inputs::*input;
    std::vector<float> UlyssesResult::*grad;
    const char* name;
    int64_t position, column;  // column of [s, heads * d]
  };
  const Element elements[] = {
      {&Inputs::q, &UlyssesResult::dq, "q", 1, 0}, {&Inputs::q, &UlyssesResult::dq, "q", 4, 5},
      {&Inputs::q, &UlyssesResult::dq, "q", 9, 7}, {&Inputs::k, &UlyssesResult::dk, "k", 0, 2},
      {&Inputs::k, &UlyssesResult::dk, "k", 6, 4}, {&Inputs::k, &UlyssesResult::dk, "k", 8, 1},
      {&Inputs::v, &UlyssesResult::dv, "v", 2, 3}, {&Inputs::v, &UlyssesResult::dv, "v", 5, 6},
      {&Inputs::v, &UlyssesResult::dv, "v", 9, 0},
  };
  constexpr float kStep = 1e-2f;
  for (const Element& e : elements) {
    const size_t at = static_cast<size_t>(e.position * width + e.column);
    Inputs plus = in, minus = in;
    (plus.*e.input)[at] += kStep;
    (minus.*e.input)[at] -= kStep;
    const double step = static_cast<double>((plus.*e.input)[at]) -
                        static_cast<double>((minus.*e.input)[at]);  // 2 h as stored
    const double numeric = (loss(plus) - loss(minus)) / step;
    const double exact = static_cast<double>((analytic.*e.grad)[at]);
    EXPECT_LE(std::abs(numeric - exact), 1e-2 * std::max(std::abs(exact), 1e-2))
        << e.name << " at position " << e.position << " column " << e.column << ": numeric "
        << numeric << ", backward " << exact;
  }
}

TEST(UlyssesAttentionCallTest, HeadsThatDoNotDivideOverCpAreRefused) {
  EXPECT_THAT(CheckUlyssesHeads(4, 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("UlyssesAttention: 4 heads do not divide over cp 3; use ring "
                                 "attention")));
  LOOM_EXPECT_OK(CheckUlyssesHeads(12, 4));
  LOOM_EXPECT_OK(CheckUlyssesHeads(0, 2));
  EXPECT_THAT(CheckUlyssesHeads(4, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cp is 0 (4 heads)")));
  EXPECT_THAT(CheckUlyssesHeads(-2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-2 heads (cp 2)")));
  // Every rank refuses before any message, so none waits for the others.
  ExpectAllOk(RunTp(3, [](Communicator& comm) -> absl::Status {
    const int64_t rows = 4, d = 2;  // seq 12 on 3 ranks
    std::vector<float> x(rows * d, 0.0f), lse(rows);
    const ConstMatrixView m = Dense(x, rows, d);
    const MatrixView o = Dense(absl::MakeSpan(x), rows, d);
    const std::vector<RingAttentionHead> heads(4,
                                               RingAttentionHead{m, m, m, o, absl::MakeSpan(lse)});
    EXPECT_THAT(
        UlyssesAttentionForward(comm, heads, 12, {}),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4 heads do not divide over cp 3")));
    const std::vector<RingAttentionHeadGrad> grads(
        2, RingAttentionHeadGrad{m, m, m, m, m, lse, o, o, o});
    EXPECT_THAT(
        UlyssesAttentionBackward(comm, grads, 12, {}),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 heads do not divide over cp 3")));
    return absl::OkStatus();
  }));
}

TEST(UlyssesAttentionCallTest, WrongShapesNameTheHead) {
  ExpectAllOk(RunTp(1, [](Communicator& comm) -> absl::Status {
    const std::vector<float> x(40, 0.5f);
    std::vector<float> out(40), lse(10);
    // Rank 0 of 1 holds all 10 positions; 9 rows of q is wrong.
    const std::vector<RingAttentionHead> one = {{Dense(x, 9, 4), Dense(x, 10, 4), Dense(x, 10, 4),
                                                 Dense(absl::MakeSpan(out), 10, 4),
                                                 absl::MakeSpan(lse)}};
    EXPECT_THAT(UlyssesAttentionForward(comm, one, 10, {}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("UlyssesAttention: q is [9,4] but rank 0 of 1 holds [10,4]")));
    EXPECT_THAT(UlyssesAttentionForward(comm, one, -1, {}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seq_len is -1")));
    return absl::OkStatus();
  }));
  ExpectAllOk(RunTp(2, [](Communicator& comm) -> absl::Status {
    const int64_t rows = 5, d = 4;  // seq 10 on 2 ranks
    std::vector<float> x(rows * d, 0.0f), lse(rows), small(rows * 2, 0.0f);
    const ConstMatrixView m = Dense(x, rows, d);
    const MatrixView o = Dense(absl::MakeSpan(x), rows, d);
    const std::vector<RingAttentionHead> forward = {
        {m, m, m, o, absl::MakeSpan(lse)}, {m, Dense(small, rows, 2), m, o, absl::MakeSpan(lse)}};
    EXPECT_THAT(UlyssesAttentionForward(comm, forward, 10, {}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("k (head 1) is [5,2] but rank " + std::to_string(comm.rank()) +
                                   " of 2 holds [5,4]")));
    const std::vector<RingAttentionHead> short_lse = {{m, m, m, o, absl::MakeSpan(lse).subspan(1)},
                                                      {m, m, m, o, absl::MakeSpan(lse)}};
    EXPECT_THAT(
        UlyssesAttentionForward(comm, short_lse, 10, {}),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lse (head 0) has 4 values")));
    const MatrixView narrow = Dense(absl::MakeSpan(small), rows, 2);
    const std::vector<RingAttentionHeadGrad> backward = {{m, m, m, m, m, lse, o, o, o},
                                                         {m, m, m, m, m, lse, o, o, narrow}};
    EXPECT_THAT(UlyssesAttentionBackward(comm, backward, 10, {}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("grad_v (head 1) is [5,2] but rank")));
    return absl::OkStatus();
  }));
}

// A communicator that failed earlier refuses the call; its error comes back as it is.
TEST(UlyssesAttentionCallTest, CommunicatorErrorsPassThrough) {
  ExpectAllOk(RunTp(2, [](Communicator& comm) -> absl::Status {
    // Both ranks wait for a message nobody sends: the short deadline breaks both.
    std::vector<float> nothing(1);
    CallOptions call;
    call.timeout = absl::Milliseconds(20);
    EXPECT_FALSE(comm.Recv(BufferView::Of(absl::MakeSpan(nothing)), 1 - comm.rank(), call).ok());
    const int64_t rows = 5, d = 4;
    std::vector<float> x(rows * d, 0.0f), lse(rows);
    const std::vector<RingAttentionHead> heads(
        2, RingAttentionHead{Dense(x, rows, d), Dense(x, rows, d), Dense(x, rows, d),
                             Dense(absl::MakeSpan(x), rows, d), absl::MakeSpan(lse)});
    EXPECT_THAT(UlyssesAttentionForward(comm, heads, 10, {}),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("failed earlier")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
