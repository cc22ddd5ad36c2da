// kiln::Error for what a user can get wrong, kiln::InternalError for kiln's own bugs.
//
// KILN_CHECK(cond, parts...) throws kiln::Error with the parts streamed together; use it for
// anything a caller can cause (bad shape, wrong dtype, bad axis, malformed file). KILN_ASSERT is
// for invariants kiln itself must keep; it throws kiln::InternalError, never aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
[[noreturn]] void throw_internal(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace kiln

#define KILN_CHECK(cond, ...)                                           \
  do {                                                                  \
    if (!(cond)) [[unlikely]] {                                         \
      throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__));         \
    }                                                                   \
  } while (0)

#define KILN_FAIL(...) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__))

#define KILN_ASSERT(cond, ...)                                                       \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      ::kiln::detail::throw_internal(#cond, __FILE__, __LINE__,                      \
                                     ::kiln::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                \
  } while (0)
