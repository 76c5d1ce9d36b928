// Hot inner loops exempt from the sanitizers' per-access checks, with the memory they read checked once instead.
// Under AddressSanitizer + UndefinedBehaviorSanitizer (CI's second build) every load of a loop like cpu::dot_f32 gets
// a shadow-memory check and every index step an overflow check, which also stops vectorization: the CPU reference's
// dot products ran about ten times slower and were most of the sanitizer run's engine-test time. A loop marked
// GRETA_NO_SANITIZE checks its whole input ranges with check_readable first: the same guarantee (every byte read is
// addressable), one shadow scan per range instead of one check per element.
#pragma once
#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#if defined(__GNUC__)
#define GRETA_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))
#else
#define GRETA_NO_SANITIZE
#endif

namespace greta {

// Under AddressSanitizer: reports (and aborts, as any bad access does) when a byte of [p, p + bytes) is not
// addressable. Without it: nothing.
inline void check_readable([[maybe_unused]] const void* p, [[maybe_unused]] size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  if (const void* bad = __asan_region_is_poisoned(const_cast<void*>(p), bytes)) {
    volatile char c = *static_cast<const volatile char*>(bad);  // an instrumented read: ASan's report, with the stack
    (void)c;
  }
#endif
}

}  // namespace greta
