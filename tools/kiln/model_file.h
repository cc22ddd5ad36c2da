// Graph files for the CLI: kiln's text IR (.kir) or an ONNX model (.onnx), and tensor files
// (.npy, or ONNX TensorProto .pb).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"

struct LoadedGraph {
  kiln::ir::Graph graph;
  // What the user calls each graph input and output (ONNX names for .onnx; IR names for .kir).
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  std::string format;  // "kir" or "onnx"
};

// known: ONNX inputs whose values kiln needs at compile time (shape tensors), by ONNX name.
LoadedGraph load_graph_file(const std::string& path, const std::map<std::string, kiln::Tensor>& known = {},
                            const std::map<std::string, int64_t>& dims = {});
kiln::Tensor load_tensor_file(const std::string& path);  // .npy or .pb
void save_tensor_file(const kiln::Tensor& t, const std::string& path);  // by extension
// "name=file" pairs from the command line.
std::map<std::string, kiln::Tensor> parse_tensor_args(const std::vector<std::string>& specs, const char* flag);
