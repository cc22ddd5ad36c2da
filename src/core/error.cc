#include "kiln/core/error.h"

namespace kiln::detail {

void throw_internal(const char* cond, const char* file, int line, const std::string& msg) {
  throw InternalError(concat("kiln internal error: ", cond, " failed at ", file, ":", line,
                             msg.empty() ? "" : ": ", msg,
                             " (this is a bug in kiln, not in your program; please report it)"));
}

}  // namespace kiln::detail
