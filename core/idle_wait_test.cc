#include "core/idle_wait.h"

#include <thread>

#include "gtest/gtest.h"

namespace loom {
namespace {

// The setting is the calling thread's: a new thread starts at kYield whatever its
// creator set, and its own setting does not leak back.
TEST(IdleWaitTest, IsPerThreadAndYieldsByDefault) {
  EXPECT_EQ(ThisThreadIdleWait(), IdleWait::kYield);
  SetThisThreadIdleWait(IdleWait::kNap);
  EXPECT_EQ(ThisThreadIdleWait(), IdleWait::kNap);
  IdleWait seen = IdleWait::kNap, after = IdleWait::kYield;
  std::thread other([&] {
    seen = ThisThreadIdleWait();
    SetThisThreadIdleWait(IdleWait::kNap);
    after = ThisThreadIdleWait();
    SetThisThreadIdleWait(IdleWait::kYield);
  });
  other.join();
  EXPECT_EQ(seen, IdleWait::kYield);
  EXPECT_EQ(after, IdleWait::kNap);
  EXPECT_EQ(ThisThreadIdleWait(), IdleWait::kNap);
  SetThisThreadIdleWait(IdleWait::kYield);
  EXPECT_EQ(ThisThreadIdleWait(), IdleWait::kYield);
}

}  // namespace
}  // namespace loom
