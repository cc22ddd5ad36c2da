// Loading graphs and tensors for `kiln run` / `kiln inspect` (see model_file.h).
#include "model_file.h"

#include <filesystem>

#if KILN_HAS_ONNX
#include "kiln/onnx.h"
#endif

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

LoadedGraph load_graph_file(const std::string& path, const std::map<std::string, kiln::Tensor>& known,
                            const std::map<std::string, int64_t>& dims) {
  LoadedGraph out;
  if (ends_with(path, ".onnx")) {
#if KILN_HAS_ONNX
    kiln::onnx::ImportOptions opt;
    opt.known_inputs = known;
    opt.dim_values = dims;
    kiln::onnx::Model m = kiln::onnx::import_model(path, opt);
    out.graph = std::move(m.graph);
    out.input_names = m.input_names;
    out.output_names = m.output_names;
    out.format = "onnx";
    return out;
#else
    KILN_FAIL(path, ": this kiln was built without ONNX support (libonnx-dev)");
#endif
  }
  KILN_CHECK(known.empty() && dims.empty(), path, ": --known and --dim apply to ONNX models only");
  out.graph = kiln::ir::load(path);
  for (const auto* v : out.graph.inputs()) out.input_names.push_back(v->name());
  for (const auto* v : out.graph.outputs()) out.output_names.push_back(v->name());
  out.format = "kir";
  return out;
}

kiln::Tensor load_tensor_file(const std::string& path) {
  if (ends_with(path, ".pb")) {
#if KILN_HAS_ONNX
    return kiln::onnx::load_tensor(path);
#else
    KILN_FAIL(path, ": reading TensorProto .pb files needs ONNX support (libonnx-dev)");
#endif
  }
  return kiln::load_npy(path);
}

void save_tensor_file(const kiln::Tensor& t, const std::string& path) {
  if (ends_with(path, ".pb")) {
#if KILN_HAS_ONNX
    kiln::onnx::save_tensor(t, path, std::filesystem::path(path).stem().string());
    return;
#else
    KILN_FAIL(path, ": writing TensorProto .pb files needs ONNX support (libonnx-dev)");
#endif
  }
  kiln::save_npy(path, t.contiguous());
}

std::map<std::string, kiln::Tensor> parse_tensor_args(const std::vector<std::string>& specs, const char* flag) {
  std::map<std::string, kiln::Tensor> out;
  for (const auto& spec : specs) {
    auto eq = spec.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, flag, " '", spec, "': expected name=file (.npy or .pb)");
    std::string name = spec.substr(0, eq);
    KILN_CHECK(!out.count(name), flag, ": '", name, "' given twice");
    out[name] = load_tensor_file(spec.substr(eq + 1));
  }
  return out;
}
