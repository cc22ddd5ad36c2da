// Optimization pipelines: which passes run at each -O level, iterated to a fixpoint.
//   -O0: nothing (the verifier only)
//   -O1: identity, dce, cse                       (cleanups that never change numerics)
//   -O2: identity, fold, transpose, reshape, unstack, pad_fold, bn_fold, branch_merge,
//        layer_norm_fusion, gelu_fusion, rotary_fusion, attention_fusion, epilogue, cse, dce
//        (+ folding, transformer-pattern and epilogue fusion; bn_fold rounds folded weights once
//        to the weight dtype, and branch_merge sums the folded branches' kernels after it; the
//        transformer patterns run before epilogue so a fused gelu can join a gemm's epilogue)
//   -O3: -O2, then eltwise (pointwise chains -> fused_elementwise; runs after epilogue so the
//        conv/gemm epilogues keep their activations)
#include <algorithm>
#include <mutex>

#include "compiler/passes/common.h"
#include "kiln/compiler.h"

namespace kiln::compiler {

void register_passes() {
  static std::once_flag once;
  std::call_once(once, [] {
    ir::register_pass("identity", passes::make_identity);
    ir::register_pass("fold", passes::make_fold);
    ir::register_pass("reshape", passes::make_reshape);
    ir::register_pass("transpose", passes::make_transpose);
    ir::register_pass("unstack", passes::make_unstack);
    ir::register_pass("bn_fold", passes::make_bn_fold);
    ir::register_pass("branch_merge", passes::make_branch_merge);
    ir::register_pass("pad_fold", passes::make_pad_fold);
    ir::register_pass("epilogue", passes::make_epilogue);
    ir::register_pass("eltwise", passes::make_eltwise);
    ir::register_pass("layer_norm_fusion", passes::make_layer_norm_fusion);
    ir::register_pass("gelu_fusion", passes::make_gelu_fusion);
    ir::register_pass("rotary_fusion", passes::make_rotary_fusion);
    ir::register_pass("attention_fusion", passes::make_attention_fusion);
    ir::register_pass("layout", passes::make_layout);
    ir::register_pass("layout_all", passes::make_layout_all);
  });
}

std::vector<std::string> pipeline(int opt_level) {
  register_passes();
  KILN_CHECK(opt_level >= 0 && opt_level <= 3, "optimization level -O", opt_level, " is not one of 0..3");
  if (opt_level == 0) return {};
  if (opt_level == 1) return {"identity", "dce", "cse"};
  std::vector<std::string> o2{"identity",          "fold",        "transpose",     "reshape",
                              "unstack",           "pad_fold",    "bn_fold",       "branch_merge",
                              "layer_norm_fusion", "gelu_fusion", "rotary_fusion", "attention_fusion",
                              "epilogue",          "cse",         "dce"};
  if (opt_level == 2) return o2;
  o2.push_back("eltwise");
  return o2;
}

std::vector<PassReport> run_passes(ir::Graph& g, const std::vector<std::string>& names, bool verify_each,
                                   bool keep_graphs) {
  register_passes();
  for (const auto& n : names) (void)ir::make_pass(n);  // unknown names fail before any pass runs
  std::vector<PassReport> reports;
  for (const auto& n : names) {
    auto r = ir::run_passes(g, {n}, verify_each);
    reports.push_back(PassReport{n, 0, r[0].changed, r[0].report, keep_graphs ? ir::print(g) : std::string()});
  }
  return reports;
}

std::vector<PassReport> optimize(ir::Graph& g, const PassOptions& options, bool keep_graphs) {
  std::vector<std::string> names = pipeline(options.opt_level);
  auto known = ir::pass_names();
  for (const auto& d : options.disabled)
    KILN_CHECK(std::find(known.begin(), known.end(), d) != known.end(), "--disable-pass: unknown pass '", d, "'");
  std::erase_if(names, [&](const std::string& n) { return options.disabled.count(n) != 0; });
  std::vector<PassReport> reports;
  for (int it = 0; it < std::max(1, options.max_iterations); ++it) {
    bool any = false;
    for (const auto& n : names) {
      auto r = ir::run_passes(g, {n}, options.verify_each);
      PassReport rep{n, it, r[0].changed, r[0].report, keep_graphs ? ir::print(g) : std::string()};
      any = any || rep.changed;
      reports.push_back(std::move(rep));
    }
    if (!options.fixpoint || !any) break;
  }
  return reports;
}

}  // namespace kiln::compiler
