// sanitizer.hpp: whether this translation unit is built under AddressSanitizer or ThreadSanitizer, for the few tests
// whose sizes or time bounds are the sanitizer's cost rather than the code's (GCC defines __SANITIZE_*__, clang has
// __has_feature).
#pragma once

namespace nns::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace nns::test
