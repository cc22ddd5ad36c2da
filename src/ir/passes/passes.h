// The IR passes that live in ir/ (the compiler's passes build on these in compiler/).
#pragma once

#include "kiln/ir.h"

namespace kiln::ir {

class VerifyPass : public Pass {
 public:
  std::string name() const override { return "verify"; }
  PassResult run(Graph& g) override;
};
class DcePass : public Pass {
 public:
  std::string name() const override { return "dce"; }
  PassResult run(Graph& g) override;
};
class CsePass : public Pass {
 public:
  std::string name() const override { return "cse"; }
  PassResult run(Graph& g) override;
};

}  // namespace kiln::ir
