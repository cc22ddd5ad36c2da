// Registration of the index family: gather, gather_elements, scatter, one_hot, topk.
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"

namespace kiln {

void register_gather_ops(OpRegistry& r);   // gather.cc: gather, gather_elements
void register_scatter_ops(OpRegistry& r);  // scatter.cc: scatter, one_hot
void register_topk_ops(OpRegistry& r);     // topk.cc
void register_gather_nd_ops(OpRegistry& r);  // gather_nd.cc: gather_nd, scatter_nd

void register_index_ops(OpRegistry& r) {
  register_gather_ops(r);
  register_scatter_ops(r);
  register_topk_ops(r);
  register_gather_nd_ops(r);
}

}  // namespace kiln
