// `kiln conformance DIR...`: runs ONNX backend-test folders through kiln's importer and the
// reference executor and compares with the stored outputs.
//
// A case is a folder with model.onnx and test_data_set_*/{input,output}_K.pb (ONNX's node,
// pytorch-converted, pytorch-operator and simple tests), or a real/<name>/data.json (the model in
// ../../light/light_<name>.onnx, its input made as ONNX's runner does: arange(n)/n in the input's
// shape with unknown dims 1). Each case prints one line; the last line is exactly
// "N passed, M failed" with ", K skipped" when cases use what kiln does not claim (an operator
// without a converter, a dtype kiln lacks, sequence or optional values).
#include "conformance.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "kiln/kiln.h"
#include "kiln/runtime.h"
#if KILN_HAS_ONNX
#include "kiln/onnx.h"
#endif

namespace fs = std::filesystem;

CLI::App* add_conformance_command(CLI::App& app, ConformanceOptions& opt) {
  auto* c = app.add_subcommand("conformance", "Run ONNX backend-test folders and report pass/fail per case");
  c->add_option("dirs", opt.dirs, "test folders, or folders of them (node/, light real/ ...)")->required();
  c->add_option("--json", opt.json, "also write per-case results as JSON to this file");
  c->add_option("--filter", opt.filter, "only cases whose name contains this text");
  c->add_option("--expect", opt.expect, "a list of case names that must pass (exit 1 if one does not)");
  c->add_option("--save-outputs", opt.save_outputs, "write kiln's outputs as <dir>/<case>/output_K.pb");
  c->add_option("--threads", opt.threads, "CPU threads (0: all)");
  c->add_option("--engine", opt.engine_level,
                "compile every case into an engine at -ON (kiln compile) and run the engine instead of the "
                "reference executor")
      ->check(CLI::Range(0, 3));
  c->add_flag("--quiet", opt.quiet, "print only failures and the summary");
  return c;
}

#if !KILN_HAS_ONNX
int run_conformance_command(const ConformanceOptions&) {
  std::cerr << "kiln conformance: this kiln was built without ONNX support (libonnx-dev)\n";
  return 2;
}
#else
namespace {

struct Case {
  std::string name;
  fs::path model;
  std::vector<fs::path> data_sets;  // test_data_set_* folders (backend tests)
  // real/*/data.json cases
  bool real = false;
  fs::path expected_output;
  double rtol = 1e-3, atol = 1e-7;
};

struct Result {
  std::string name;
  std::string status;  // passed, failed, skipped
  std::string reason;
  double max_abs_error = 0;
  double ms = 0;
};

// A tiny reader for the flat data.json files: the string or number after "key":.
std::string json_field(const std::string& text, const std::string& key) {
  size_t k = text.find("\"" + key + "\"");
  if (k == std::string::npos) return "";
  size_t p = text.find(':', k + key.size() + 2);
  if (p == std::string::npos) return "";
  ++p;
  while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
  if (p < text.size() && text[p] == '"') {
    size_t e = text.find('"', p + 1);
    return e == std::string::npos ? "" : text.substr(p + 1, e - p - 1);
  }
  size_t e = p;
  while (e < text.size() && (std::isdigit(static_cast<unsigned char>(text[e])) || std::strchr("+-.eE", text[e]))) ++e;
  return text.substr(p, e - p);
}

void collect(const fs::path& dir, std::vector<Case>& out) {
  if (fs::exists(dir / "model.onnx")) {
    Case c;
    c.name = dir.filename().string();
    c.model = dir / "model.onnx";
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) c.data_sets.push_back(e.path());
    std::sort(c.data_sets.begin(), c.data_sets.end());
    out.push_back(c);
    return;
  }
  if (fs::exists(dir / "data.json")) {
    std::ifstream f(dir / "data.json");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    Case c;
    c.real = true;
    std::string model_name = json_field(text, "model_name");
    c.name = "real_" + model_name;
    fs::path light = dir.parent_path().parent_path() / "light";
    c.model = light / ("light_" + model_name + ".onnx");
    c.expected_output = light / ("light_" + model_name + "_output_0.pb");
    if (auto r = json_field(text, "rtol"); !r.empty()) c.rtol = std::stod(r);
    if (auto a = json_field(text, "atol"); !a.empty()) c.atol = std::stod(a);
    out.push_back(c);
    return;
  }
  std::vector<fs::path> subs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) subs.push_back(e.path());
  std::sort(subs.begin(), subs.end());
  for (const auto& s : subs) collect(s, out);
}

std::vector<fs::path> numbered(const fs::path& dir, const std::string& stem) {
  std::vector<fs::path> files;
  for (int k = 0;; ++k) {
    fs::path p = dir / (stem + "_" + std::to_string(k) + ".pb");
    if (!fs::exists(p)) break;
    files.push_back(p);
  }
  return files;
}

// Is this failure about something kiln does not claim (rather than a wrong answer)?
bool is_unsupported(const std::string& msg) {
  static const char* const markers[] = {"unsupported operator", "unsupported ONNX dtype", "only tensor inputs",
                                        "operator domain", "not supported"};
  return std::any_of(std::begin(markers), std::end(markers),
                     [&](const char* m) { return msg.find(m) != std::string::npos; });
}

// Largest |got - want| and whether every element is within atol + rtol * |want| (NaN matches NaN).
bool compare(const kiln::Tensor& got, const kiln::Tensor& want, double rtol, double atol, double& max_err,
             std::string& why) {
  if (got.dtype() != want.dtype()) {
    why = "dtype " + std::string(kiln::dtype_name(got.dtype())) + ", expected " + std::string(kiln::dtype_name(want.dtype()));
    return false;
  }
  if (got.shape() != want.shape()) {
    why = "shape " + kiln::shape_str(got.shape()) + ", expected " + kiln::shape_str(want.shape());
    return false;
  }
  kiln::Tensor g = got.to(kiln::DType::f64).contiguous(), w = want.to(kiln::DType::f64).contiguous();
  const double* gp = g.data<double>();
  const double* wp = w.data<double>();
  bool exact = !kiln::is_floating(want.dtype());
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    double a = gp[i], b = wp[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) {
        if (first_bad < 0) first_bad = i;
        ++bad;
      }
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) {
        if (first_bad < 0) first_bad = i;
        ++bad;
      }
      continue;
    }
    double err = std::abs(a - b);
    max_err = std::max(max_err, err);
    if (exact ? err != 0 : err > atol + rtol * std::abs(b)) {
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
  }
  if (bad) {
    std::ostringstream os;
    os << bad << " of " << g.numel() << " elements differ (max abs error " << max_err << "; first at flat index "
       << first_bad << ": got " << gp[first_bad] << ", expected " << wp[first_bad] << ")";
    why = os.str();
    return false;
  }
  return true;
}

Result run_case(const Case& c, const ConformanceOptions& opt) {
  Result r;
  r.name = c.name;
  auto t0 = std::chrono::steady_clock::now();
  try {
    kiln::onnx::ModelInfo info = kiln::onnx::read_model_info(c.model.string());
    if (!info.non_tensor.empty())
      throw kiln::Error("graph value '" + info.non_tensor + "' is a sequence, map or optional: only tensor inputs and outputs are supported");
    std::vector<std::pair<std::vector<kiln::Tensor>, std::vector<kiln::Tensor>>> sets;
    if (c.real) {
      // ONNX's runner: arange(n)/n in the input's declared shape, unknown dims 1.
      kiln::onnx::Model probe = kiln::onnx::import_model(c.model.string());
      std::vector<kiln::Tensor> ins;
      for (const auto* v : probe.graph.inputs()) {
        std::vector<int64_t> dims;
        for (const auto& d : v->type().shape) dims.push_back(d.is_symbolic() ? 1 : d.size);
        kiln::Shape s(dims);
        double n = static_cast<double>(kiln::numel_of(s));
        ins.push_back((kiln::arange(kiln::numel_of(s), kiln::TensorOptions(kiln::DType::f64)) / kiln::scalar_tensor(n, kiln::TensorOptions(kiln::DType::f64)))
                          .reshape(s)
                          .to(v->type().dtype));
      }
      sets.push_back({ins, {kiln::onnx::load_tensor(c.expected_output.string())}});
    } else {
      if (c.data_sets.empty()) throw kiln::Error("no test_data_set_* folder");
      for (const auto& ds : c.data_sets) {
        std::vector<kiln::Tensor> ins, outs;
        for (const auto& p : numbered(ds, "input")) ins.push_back(kiln::onnx::load_tensor(p.string()));
        for (const auto& p : numbered(ds, "output")) outs.push_back(kiln::onnx::load_tensor(p.string()));
        sets.push_back({ins, outs});
      }
    }
    int set_index = 0;
    for (const auto& [ins, want] : sets) {
      if (ins.size() != info.inputs.size())
        throw kiln::Error("the test set has " + std::to_string(ins.size()) + " inputs, the model declares " +
                          std::to_string(info.inputs.size()));
      kiln::onnx::ImportOptions io;
      for (size_t i = 0; i < ins.size(); ++i) io.known_inputs[info.inputs[i]] = ins[i];
      kiln::onnx::Model m = kiln::onnx::import_model(c.model.string(), io);
      std::map<std::string, kiln::Tensor> feed;
      for (size_t i = 0; i < m.graph.inputs().size(); ++i) {
        auto pos = std::find(info.inputs.begin(), info.inputs.end(), m.input_names[i]) - info.inputs.begin();
        feed[m.graph.inputs()[i]->name()] = ins[static_cast<size_t>(pos)];
      }
      std::vector<kiln::Tensor> got;
      if (opt.engine_level >= 0) {
        kiln::runtime::CompileOptions copt;
        copt.passes.opt_level = opt.engine_level;
        auto engine = std::make_shared<const kiln::runtime::Engine>(kiln::runtime::compile(m.graph, copt).engine);
        kiln::runtime::Executor exec(engine);
        std::vector<kiln::Tensor> ordered;
        for (const auto* v : m.graph.inputs()) ordered.push_back(feed.at(v->name()));
        got = exec.run(ordered);
      } else {
        got = kiln::ir::run(m.graph, feed);
      }
      if (got.size() != want.size())
        throw kiln::Error("kiln computes " + std::to_string(got.size()) + " outputs, the test stores " +
                          std::to_string(want.size()));
      for (size_t k = 0; k < got.size(); ++k) {
        if (!opt.save_outputs.empty()) {
          fs::path d = fs::path(opt.save_outputs) / c.name / ("test_data_set_" + std::to_string(set_index));
          fs::create_directories(d);
          kiln::onnx::save_tensor(got[k], (d / ("output_" + std::to_string(k) + ".pb")).string());
        }
        std::string why;
        if (!compare(got[k], want[k], c.rtol, c.atol, r.max_abs_error, why)) {
          r.status = "failed";
          r.reason = "output " + std::to_string(k) + " ('" + (k < info.outputs.size() ? info.outputs[k] : "?") +
                     "') of test_data_set_" + std::to_string(set_index) + ": " + why;
          return r;
        }
      }
      ++set_index;
    }
    r.status = "passed";
  } catch (const kiln::Error& e) {
    r.reason = e.what();
    r.status = is_unsupported(r.reason) ? "skipped" : "failed";
  } catch (const std::exception& e) {
    r.status = "failed";
    r.reason = std::string("unexpected error: ") + e.what();
  }
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\', o += ch;
    else if (ch == '\n') o += "\\n";
    else if (static_cast<unsigned char>(ch) < 0x20) o += ' ';
    else o += ch;
  }
  return o;
}

}  // namespace

int run_conformance_command(const ConformanceOptions& opt) {
  if (opt.threads > 0) kiln::set_num_threads(opt.threads);
  std::vector<Case> cases;
  for (const auto& d : opt.dirs) {
    if (!fs::is_directory(d)) throw kiln::Error("kiln conformance: '" + d + "' is not a folder");
    collect(d, cases);
  }
  if (!opt.filter.empty()) {
    std::erase_if(cases, [&](const Case& c) { return c.name.find(opt.filter) == std::string::npos; });
  }
  std::vector<Result> results;
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& c : cases) {
    Result r = run_case(c, opt);
    (r.status == "passed" ? passed : r.status == "failed" ? failed : skipped)++;
    if (!opt.quiet || r.status == "failed") {
      std::cout << r.status << " " << r.name;
      if (!r.reason.empty()) {
        std::string reason = r.reason;
        std::replace(reason.begin(), reason.end(), '\n', ' ');
        if (reason.size() > 400) reason = reason.substr(0, 400) + "...";
        std::cout << ": " << reason;
      }
      std::cout << "\n";
    }
    results.push_back(std::move(r));
  }
  int rc = failed ? 1 : 0;
  if (!opt.expect.empty()) {
    std::ifstream f(opt.expect);
    if (!f) throw kiln::Error("kiln conformance: cannot read --expect list '" + opt.expect + "'");
    std::set<std::string> passing;
    for (const auto& r : results)
      if (r.status == "passed") passing.insert(r.name);
    std::set<std::string> ran;
    for (const auto& r : results) ran.insert(r.name);
    std::string line;
    int regressions = 0;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (ran.count(line) && !passing.count(line)) {
        std::cout << "regression: " << line << " is in " << opt.expect << " but did not pass\n";
        ++regressions;
      }
    }
    rc = regressions ? 1 : 0;
  }
  if (!opt.json.empty()) {
    std::ofstream j(opt.json);
    j << "{\"passed\": " << passed << ", \"failed\": " << failed << ", \"skipped\": " << skipped << ", \"cases\": [\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      j << "  {\"name\": \"" << json_escape(r.name) << "\", \"status\": \"" << r.status << "\", \"reason\": \""
        << json_escape(r.reason) << "\", \"max_abs_error\": " << r.max_abs_error << ", \"ms\": " << r.ms << "}"
        << (i + 1 < results.size() ? ",\n" : "\n");
    }
    j << "]}\n";
  }
  std::cout << passed << " passed, " << failed << " failed";
  if (skipped) std::cout << ", " << skipped << " skipped";
  std::cout << std::endl;
  return rc;
}
#endif
