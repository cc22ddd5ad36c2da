// Registration of the index family (being filled in; see issue #2).
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"

namespace kiln {

void register_index_ops(OpRegistry& r) { (void)r; }

}  // namespace kiln
