// libFuzzer target for kiln's ONNX importer: the input is a serialized ModelProto. Importing must
// either succeed or throw kiln::Error; when it succeeds and every value in the graph is static and
// small, the graph runs once on random inputs (again: a result or kiln::Error). Anything else (a
// crash, a sanitizer report, InternalError or another exception escaping) is a finding.
//
// Note [Outcome counters]
// Built with GCC, libkiln carries no coverage libFuzzer can read (fuzz/CMakeLists.txt). The target
// then reports what happened instead, in libFuzzer's extra-counters section: one counter per kind
// of error (the message with names and numbers removed) and per op type imported or run. An input
// reaching a new check or a new op counts as new coverage, so the corpus grows toward the
// importer's checks rather than collapsing to one byte. With clang's instrumentation the counters
// are a small addition to real coverage.
//
// KILN_FUZZ_BASE_DIR, when set, is the folder external data resolves against (fuzz/make_seeds.py
// writes one next to the seeds); otherwise external data is refused.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "kiln/core/generator.h"
#include "kiln/ir.h"
#include "kiln/onnx.h"

namespace {

// Bounds that keep one execution fast and small under ASan.
constexpr int64_t kMaxConstantElements = int64_t{1} << 20;
constexpr int64_t kMaxValueElements = int64_t{1} << 16;

// numel of a static shape, or -1 when a dim is symbolic or the count passes `limit`.
int64_t bounded_numel(const kiln::ir::ValueType& t, int64_t limit) {
  int64_t n = 1;
  for (const auto& d : t.shape) {
    if (d.is_symbolic() || d.size < 0) return -1;
    if (d.size == 0) return 0;
    if (n > limit / d.size) return -1;
    n *= d.size;
  }
  return n;
}

constexpr size_t kOutcomeCounters = 1 << 14;
__attribute__((section("__libfuzzer_extra_counters"), used)) uint8_t g_outcomes[kOutcomeCounters];

void count_outcome(std::string_view what) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : what) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  uint8_t& counter = g_outcomes[h % kOutcomeCounters];
  if (counter < 255) ++counter;
}

// An error's kind: the message without quoted names and numbers.
void count_error(const char* stage, const kiln::Error& e) {
  std::string kind = stage;
  bool quoted = false;
  for (const char* p = e.what(); *p; ++p) {
    if (*p == '\'') quoted = !quoted;
    else if (!quoted && !std::isdigit(static_cast<unsigned char>(*p))) kind += *p;
  }
  count_outcome(kind);
}

bool small_and_static(const kiln::ir::Graph& g) {
  for (const kiln::ir::Value* v : g.inputs())
    if (bounded_numel(v->type(), kMaxValueElements) < 0) return false;
  for (const kiln::ir::Node* n : g.nodes())
    for (const kiln::ir::Value* v : n->outputs())
      if (bounded_numel(v->type(), kMaxValueElements) < 0) return false;
  return true;
}

void run_once(const kiln::ir::Graph& g, uint64_t seed) {
  kiln::Generator gen(seed);
  std::vector<kiln::Tensor> inputs;
  for (const kiln::ir::Value* v : g.inputs()) {
    kiln::Shape shape;
    for (const auto& d : v->type().shape) shape.push_back(d.size);
    // Values in [-2, 2): small integers for integer inputs (indices, shapes), never huge.
    kiln::Tensor t = kiln::rand(shape, kiln::TensorOptions(kiln::DType::f64), &gen) * 4.0 - 2.0;
    inputs.push_back(t.to(v->type().dtype));
  }
  try {
    (void)kiln::ir::run(g, inputs);
    count_outcome("run ok");
  } catch (const kiln::Error& e) {
    count_error("run: ", e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string base_dir = [] {
    const char* d = std::getenv("KILN_FUZZ_BASE_DIR");
    return std::string(d ? d : "");
  }();
  kiln::onnx::ImportOptions options;
  options.max_constant_elements = kMaxConstantElements;
  kiln::onnx::Model model;
  try {
    model = kiln::onnx::import_bytes(std::string_view(reinterpret_cast<const char*>(data), size), base_dir, options);
  } catch (const kiln::Error& e) {
    count_error("import: ", e);
    return 0;
  }
  for (const kiln::ir::Node* n : model.graph.nodes()) count_outcome(n->op().name());
  if (small_and_static(model.graph)) run_once(model.graph, size);
  return 0;
}
