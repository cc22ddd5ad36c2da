// Named passes and the loop that runs them, verifying after each one in debug builds.
#include "ir/passes/passes.h"

namespace kiln::ir {

PassResult VerifyPass::run(Graph& g) {
  verify(g);
  return {false, "verify: ok"};
}

namespace {
// Passes added by higher layers, in registration order.
std::vector<std::pair<std::string, PassFactory>>& registered() {
  static std::vector<std::pair<std::string, PassFactory>> r;
  return r;
}
}  // namespace

void register_pass(const std::string& name, PassFactory factory) {
  KILN_ASSERT(name != "cse" && name != "dce" && name != "verify", "pass '", name, "' is built in");
  for (const auto& [n, f] : registered()) KILN_ASSERT(n != name, "pass '", name, "' registered twice");
  registered().emplace_back(name, std::move(factory));
}

std::vector<std::string> pass_names() {
  std::vector<std::string> names{"cse", "dce", "verify"};
  for (const auto& [n, f] : registered()) names.push_back(n);
  return names;
}

std::unique_ptr<Pass> make_pass(const std::string& name) {
  if (name == "verify") return std::make_unique<VerifyPass>();
  if (name == "dce") return std::make_unique<DcePass>();
  if (name == "cse") return std::make_unique<CsePass>();
  for (const auto& [n, f] : registered())
    if (n == name) return f();
  std::string known;
  for (const auto& n : pass_names()) known += (known.empty() ? "" : ", ") + n;
  KILN_FAIL("unknown pass '", name, "' (known passes: ", known, ")");
}

std::vector<PassResult> run_passes(Graph& g, const std::vector<std::string>& names, bool verify_each) {
#ifndef NDEBUG
  verify_each = true;
#endif
  std::vector<std::unique_ptr<Pass>> passes;
  for (const auto& n : names) passes.push_back(make_pass(n));  // unknown names fail before any pass runs
  std::vector<PassResult> results;
  for (auto& p : passes) {
    results.push_back(p->run(g));
    if (verify_each) {
      auto errs = verify_errors(g);
      if (!errs.empty()) {
        std::string msg;
        for (const auto& e : errs) msg += "\n  " + e;
        KILN_ASSERT(false, "pass '", p->name(), "' produced an invalid graph:", msg);
      }
    }
  }
  return results;
}

}  // namespace kiln::ir
