// The resampling family: resize, N-d pooling with ONNX semantics, grid_sample.
#include "ops/defs/register_all.h"

namespace kiln {

void register_resize_ops(OpRegistry& r);       // resize.cc
void register_pool_nd_ops(OpRegistry& r);      // pool_nd.cc
void register_grid_sample_ops(OpRegistry& r);  // grid_sample.cc

void register_resample_ops(OpRegistry& r) {
  register_resize_ops(r);
  register_pool_nd_ops(r);
  register_grid_sample_ops(r);
}

}  // namespace kiln
