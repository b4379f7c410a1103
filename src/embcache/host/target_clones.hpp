// Function multi-versioning for the vectorised loops (GCC target_clones: one binary picks the
// AVX-512, AVX2 or plain build of a function when it loads). Under ThreadSanitizer the clones'
// resolvers run, instrumented, before its runtime has started and crash the process, so a TSan
// build gets the plain version only; which instructions a loop uses cannot change a race. Clang
// (scripts/fuzz.sh's build) does not multiversion function templates: it gets the plain version
// too.
#pragma once

#if defined(__SANITIZE_THREAD__) || defined(__clang__)
#define EMBCACHE_TARGET_CLONES(...)
#else
#define EMBCACHE_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#endif
