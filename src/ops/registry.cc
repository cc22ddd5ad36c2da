// Note [One definition]
// Every operator is one OpDef in this registry: schema, inference, kernels (tactics), and the
// derivative / batching / ONNX rule slots. Eager calls, autograd, tracing, the IR, the ONNX
// importer and the compiler all look ops up here, so an op can never mean two things. The
// built-in families register in register_builtin_ops() (src/ops/defs/register_all.cc) in a fixed
// order, explicitly, so no static-initialization order or linker dead-stripping can drop one.
#include <algorithm>

#include "kiln/ops/op_def.h"
#include "ops/defs/register_all.h"

namespace kiln {

OpRegistry& OpRegistry::instance() {
  static OpRegistry* reg = [] {
    auto* r = new OpRegistry();  // never destroyed: ops are referenced until exit
    register_builtin_ops(*r);
    return r;
  }();
  return *reg;
}

OpDef& OpRegistry::add(const std::string& schema_text) {
  auto def = std::make_unique<OpDef>(schema_text);
  KILN_ASSERT(find(def->name()) == nullptr, "op '", def->name(), "' registered twice");
  ops_.push_back(std::move(def));
  return *ops_.back();
}

const OpDef* OpRegistry::find(const std::string& name) const {
  for (const auto& d : ops_)
    if (d->name() == name) return d.get();
  return nullptr;
}

OpDef& OpRegistry::extend(const std::string& name) {
  for (const auto& d : ops_)
    if (d->name() == name) return *d;
  KILN_ASSERT(false, "extend: op '", name, "' is not registered (register its family first)");
  throw InternalError("unreachable");
}

const OpDef& OpRegistry::get(const std::string& name) const {
  const OpDef* d = find(name);
  KILN_CHECK(d != nullptr, "unknown op '", name, "'");
  return *d;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& d : ops_) out.push_back(d.get());
  std::sort(out.begin(), out.end(), [](const OpDef* a, const OpDef* b) { return a->name() < b->name(); });
  return out;
}

const OpDef& op(const std::string& name) { return OpRegistry::instance().get(name); }

}  // namespace kiln
