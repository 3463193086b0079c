// ThreadSanitizer suppressions for programs that link the gloo transport.
//
// Debian's libgloo is not built with -fsanitize=thread. Its own synchronization (the
// atomics and shared_ptr reference counts behind gloo's WeakNonOwningPtr, which keep a
// pair from touching an UnboundBuffer being destroyed) is invisible to TSan, while the
// pthread calls it makes are intercepted. So TSan reports races between gloo's loop
// thread signalling a buffer and the thread that destroys it after its wait ended:
// races it cannot check. Races whose stacks run through libgloo are suppressed; every
// race in Loom's own code (both stacks outside libgloo) is still reported.
//
// TSan reads this hook from the executable at startup (so tests that link it are
// linkstatic: in a shared library it would lose to libtsan's own default); without
// TSan it is never called.
extern "C" const char* __tsan_default_suppressions();

extern "C" const char* __tsan_default_suppressions() { return "race:libgloo.so\n"; }
