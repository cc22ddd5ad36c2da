// ONNX in and out (DESIGN.md: onnx/). Import reads a ModelProto with ONNX's own generated classes
// (Debian's libonnx-dev) and maps every node onto kiln's ops, folding whatever is constant (shape
// subgraphs, ConstantOfShape weights); export writes kiln's IR as an ONNX model at opset 17.
// Errors name the ONNX node: "node #12 'conv1' (Conv): ...".
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ir.h"

namespace kiln::onnx {

struct ImportOptions {
  // Values for graph inputs that kiln must know when it compiles: inputs that feed a position kiln
  // takes as an attribute (Reshape's shape, Slice's starts, TopK's k, ...). Such an input becomes a
  // constant with the given value; an input given here that no such position reads stays an input.
  std::map<std::string, Tensor> known_inputs;
  // Sizes for symbolic input dims ("batch" -> 8). Unbound symbols stay symbolic.
  std::map<std::string, int64_t> dim_values;
  // Largest tensor (elements) the importer will materialize from a declared shape
  // (ConstantOfShape, external data): guards against hostile files declaring huge dims.
  int64_t max_constant_elements = int64_t{1} << 30;
};

// An imported model: kiln's graph plus what ONNX called its inputs and outputs (kiln value names
// must be identifiers; ONNX names may be any string).
struct Model {
  ir::Graph graph;
  std::vector<std::string> input_names;   // ONNX names of graph.inputs(), in order
  std::vector<std::string> output_names;  // ONNX names of graph.outputs(), in order
  int64_t ir_version = 0;
  int64_t opset = 0;  // the ai.onnx opset the model imports
  std::string producer;
};

// Reads `path` (external data is resolved relative to its folder and must stay inside it).
Model import_model(const std::string& path, const ImportOptions& options = {});
// Parses serialized ModelProto bytes; `base_dir` is where external data lives ("" forbids it).
Model import_bytes(std::string_view bytes, const std::string& base_dir = "", const ImportOptions& options = {});

// What a model file declares, without converting it: graph input names (initializers excluded),
// output names and the ai.onnx opset. Backend tests order their input_K.pb files this way.
struct ModelInfo {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  int64_t opset = 0;
  std::string non_tensor;  // the first input or output that is a sequence, map or optional ("" if none)
};
ModelInfo read_model_info(const std::string& path);

// ONNX op types the importer converts (sorted).
std::vector<std::string> supported_ops();

// TensorProto files (.pb), as ONNX's backend tests store inputs and outputs.
Tensor load_tensor(const std::string& path);
Tensor parse_tensor(std::string_view bytes, const std::string& where = "<bytes>");
void save_tensor(const Tensor& t, const std::string& path, const std::string& name = "");

struct ExportOptions {
  int64_t opset = 17;
  std::string producer_name = "kiln";
  std::string graph_name;  // default: the graph's own name
};
// Writes `g` as an ONNX model; kiln::Error naming the node when an op has no ONNX form. The file
// passes onnx.checker (tests/onnx) and ONNX Runtime reproduces kiln's outputs.
void save(const ir::Graph& g, const std::string& path, const ExportOptions& options = {});
std::string export_bytes(const ir::Graph& g, const ExportOptions& options = {});

}  // namespace kiln::onnx
