#include "core/idle_wait.h"

namespace loom {
namespace {

thread_local IdleWait this_thread_idle_wait = IdleWait::kYield;

}  // namespace

IdleWait ThisThreadIdleWait() { return this_thread_idle_wait; }

void SetThisThreadIdleWait(IdleWait wait) { this_thread_idle_wait = wait; }

}  // namespace loom
