// Registration of the shape family: the ops that make new tensors by moving elements (the views
// and copies register themselves from views.cc and copy.cc).
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"

namespace kiln {

void register_join_ops(OpRegistry& r);   // join.cc: concat, split
void register_pad_ops(OpRegistry& r);    // pad.cc: tile, pad
void register_trilu_ops(OpRegistry& r);  // trilu.cc

void register_shape_ops(OpRegistry& r) {
  register_join_ops(r);
  register_pad_ops(r);
  register_trilu_ops(r);
}

}  // namespace kiln
