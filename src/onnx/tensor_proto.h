// Conversion between kiln Tensors and ONNX TensorProtos, shared by the importer (initializers,
// Constant values, backend-test .pb files) and the exporter. Internal to the onnx layer.
#pragma once

#include <cstdint>
#include <string>

#include <onnx/onnx_pb.h>

#include "kiln/core/tensor.h"

namespace kiln::onnx {

// ONNX's TensorProto.DataType number for a kiln dtype.
int32_t to_onnx_dtype(DType t);
// The kiln dtype of an ONNX element type; kiln::Error "unsupported ONNX dtype UINT16 in <where>"
// for types kiln lacks (and "unknown ONNX dtype 99 in <where>" for numbers ONNX does not define).
DType from_onnx_dtype(int32_t onnx_type, const std::string& where);
// "FLOAT", "UINT16", ... ("99" for an unknown number).
std::string onnx_dtype_name(int32_t onnx_type);

// Reads a TensorProto's value: raw_data, the typed fields (float_data, int32_data for the narrow
// types and the 16-bit floats' bits, int64_data, double_data) or external data
// (data_location = EXTERNAL: location / offset / length relative to `base_dir`, which must contain
// the file; "" forbids external data). Declared dims are checked (non-negative, at most
// `max_elements` elements) and the data's size against them before anything is allocated.
// kiln::Error naming the tensor (its name, or `where` when given) and what is wrong.
Tensor tensor_from_proto(const ::onnx::TensorProto& proto, const std::string& base_dir, int64_t max_elements,
                         const std::string& where = "");

// Writes `t` (any dtype, layout or device) as dims + data_type + raw_data (little-endian).
// The name is left to the caller.
void tensor_to_proto(const Tensor& t, ::onnx::TensorProto* proto);

}  // namespace kiln::onnx
