// `kiln train`: Conv(1->32) ReLU MaxPool Conv(32->64) ReLU MaxPool Flatten Linear(256->10) on the
// digits, Adam, seeded init and shuffling; a progress line per epoch, the final test accuracy on the
// fixed 360-row test split, the weights saved as safetensors and, with --export, the model as ONNX.
// With --engine the whole pipeline follows: the exported ONNX file is imported, compiled into an
// engine (pass report, memory plan), saved, loaded back and run on the test split; accuracy eager
// vs engine, latency and the per-layer profile are printed.
#include "train.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "kiln/kiln.h"
#if KILN_HAS_ONNX
#include "kiln/onnx.h"
#endif
#include "kiln/runtime.h"

using namespace kiln;

std::string default_digits_path() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = (exe.parent_path() / KILN_INSTALLED_DIGITS).lexically_normal();
    if (std::filesystem::is_regular_file(installed, ec)) return installed.string();
  }
  return KILN_DEFAULT_DIGITS;
}

CLI::App* add_train_command(CLI::App& app, TrainOptions& opt) {
  auto* c = app.add_subcommand("train", "Train a small CNN on the 8x8 handwritten digits (first 1,437 rows "
                                        "train, last 360 test) and save digits.safetensors");
  c->add_option("--data", opt.data,
                 "digits CSV (64 pixels 0..16 then the label per row); default: the installed copy, "
                 "<exe dir>/../share/kiln/digits.csv, else the source tree's data/digits/digits.csv");
  c->add_option("--out", opt.out, "where to save the trained weights (safetensors)");
  c->add_option("--export", opt.export_path,
                "also write the trained model as ONNX (opset 17; input 'image' [batch, 1, 8, 8], output 'logits')");
  c->add_option("--engine", opt.engine_path,
                "with --export: compile the ONNX file into this engine, run it on the test split and compare "
                "with eager (accuracy, latency, per-layer profile, pass report)");
  c->add_option("-O", opt.opt_level, "optimization level for --engine")->check(CLI::Range(0, 3));
  c->add_option("--epochs", opt.epochs, "passes over the training rows")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  c->add_option("--batch-size", opt.batch_size, "images per step")->check(CLI::Range(int64_t{1}, int64_t{1437}));
  c->add_option("--lr", opt.lr, "Adam learning rate (cosine-decayed to 0)")->check(CLI::PositiveNumber);
  c->add_option("--seed", opt.seed, "seed of the initialization and the shuffling");
  c->add_option("--threads", opt.threads, "CPU threads (0: the cores this process may use)")->check(CLI::Range(0, 1024));
  c->add_option("--min-accuracy", opt.min_accuracy, "fail (exit 1) when the test accuracy is below this")
      ->check(CLI::Range(0.0, 1.0));
  return c;
}

namespace {
double accuracy(nn::Module& net, const Tensor& x, const Tensor& y) {
  NoGradGuard ng;
  net.eval();
  Tensor pred = net(x).argmax(1);
  net.train();
  return pred.eq(y).to(DType::f64).mean().item<double>();
}
// Note [Shift augmentation]: every training image moves by a random (dy, dx) in {-1, 0, 1}^2 (zero
// fill), drawn from the seeded generator; the test split of this set comes from other writers, and
// without it the CNN overfits the 1,437 training rows (about 95% test accuracy instead of 97+%).
Tensor shift_augment(const Tensor& x, Generator& gen) {
  Tensor src = x.contiguous();
  Tensor out = zeros(x.shape());
  const int64_t n = x.size(0);
  const float* s = src.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t dy = static_cast<int64_t>(gen.next_u64() % 3) - 1, dx = static_cast<int64_t>(gen.next_u64() % 3) - 1;
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 8; ++c) {
        const int64_t rr = r - dy, cc = c - dx;
        if (rr >= 0 && rr < 8 && cc >= 0 && cc < 8) o[i * 64 + r * 8 + c] = s[i * 64 + rr * 8 + cc];
      }
  }
  return out;
}
// The network in eval mode, traced on two test images with a symbolic batch dim, written as ONNX.
void export_onnx(nn::Module& net, const Tensor& test_x, const std::string& path) {
#if KILN_HAS_ONNX
  NoGradGuard ng;
  net.eval();
  fn::TraceOptions topt;
  topt.input_names = {"image"};
  topt.output_names = {"logits"};
  topt.batch_inputs = {0};
  topt.graph_name = "digits_cnn";
  ir::Graph g = fn::trace([&](const std::vector<Tensor>& x) { return net(x[0]); }, {test_x.slice(0, 0, 2)}, topt);
  net.train();
  onnx::save(g, path);
  std::printf("exported %s (ONNX opset 17, %zu nodes, %lld parameters)\n", path.c_str(), g.num_nodes(),
              static_cast<long long>(g.parameter_count()));
#else
  (void)net;
  (void)test_x;
  KILN_FAIL("kiln train --export '", path, "': this kiln was built without ONNX support (libonnx-dev not found)");
#endif
}
// The pipeline's second half: ONNX file -> kiln IR -> optimized engine on disk -> loaded back and run.
int engine_stage(const TrainOptions& opt, const Tensor& test_x, const Tensor& test_y, double eager_acc) {
#if KILN_HAS_ONNX
  using clock = std::chrono::steady_clock;
  const int64_t n = test_x.size(0);
  std::printf("\n== compile %s -> %s (-O%d, batch 1..%lld)\n", opt.export_path.c_str(), opt.engine_path.c_str(),
              opt.opt_level, static_cast<long long>(n));
  const auto c0 = clock::now();
  onnx::Model model = onnx::import_model(opt.export_path);
  runtime::CompileOptions copt;
  copt.passes.opt_level = opt.opt_level;
  copt.batch_min = 1;
  copt.batch_max = n;
  copt.input_names = model.input_names;
  copt.output_names = model.output_names;
  runtime::CompileResult cr = runtime::compile(model.graph, copt);
  const double compile_ms = std::chrono::duration<double, std::milli>(clock::now() - c0).count();
  for (const auto& r : cr.passes)
    if (r.changed) std::printf("  pass %-10s %s\n", r.pass.c_str(), r.report.c_str());
  std::printf("  %zu graph nodes -> %zu engine steps, compiled in %.0f ms\n  memory: %s\n", model.graph.num_nodes(),
              cr.engine.steps.size(), compile_ms, cr.memory_summary.c_str());
  cr.engine.save(opt.engine_path);

  // Run what was saved, as a deployment would.
  auto engine = std::make_shared<const runtime::Engine>(runtime::Engine::load(opt.engine_path));
  runtime::Executor exec(engine);
  Tensor logits = exec.run({test_x.contiguous()})[0];
  const double engine_acc = logits.argmax(1).eq(test_y).to(DType::f64).mean().item<double>();
  std::printf("\n== engine %s (target %s)\n  test accuracy: eager %.2f%%, engine %.2f%% (%lld images)\n",
              opt.engine_path.c_str(), engine->target.name().c_str(), 100.0 * eager_acc, 100.0 * engine_acc,
              static_cast<long long>(n));

  // Latency: median of repeated runs at batch 1 and at the whole test split, then a profiled pass.
  auto median_ms = [&](const Tensor& x, int reps) {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      const auto r0 = clock::now();
      (void)exec.run({x});
      t.push_back(std::chrono::duration<double, std::milli>(clock::now() - r0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  Tensor one = test_x.slice(0, 0, 1).contiguous();
  (void)median_ms(one, 5);  // warm-up
  const double ms1 = median_ms(one, 50);
  const double msn = median_ms(test_x.contiguous(), 20);
  std::printf("  latency (median): batch 1 %.3f ms; batch %lld %.3f ms (%.0f images/s)\n", ms1,
              static_cast<long long>(n), msn, 1000.0 * static_cast<double>(n) / msn);
  exec.set_profiling(true);
  for (int i = 0; i < 20; ++i) (void)exec.run({test_x.contiguous()});
  double total = 0;
  for (const auto& l : exec.profile()) total += l.ms;
  std::printf("  per-layer profile (batch %lld, 20 runs):\n", static_cast<long long>(n));
  std::printf("    %-24s %-18s %9s %7s\n", "layer", "op", "ms/run", "share");
  for (const auto& l : exec.profile())
    std::printf("    %-24s %-18s %9.3f %6.1f%%\n", l.name.c_str(), l.op.c_str(), l.ms / std::max<int64_t>(l.runs, 1),
                total > 0 ? 100.0 * l.ms / total : 0.0);
  if (std::abs(engine_acc - eager_acc) > 1.0 / static_cast<double>(n) + 1e-12) {
    std::fprintf(stderr, "kiln train: the engine's accuracy differs from eager by more than one image\n");
    return 1;
  }
  return 0;
#else
  (void)test_x;
  (void)test_y;
  (void)eager_acc;
  KILN_FAIL("kiln train --engine '", opt.engine_path, "': this kiln was built without ONNX support");
#endif
}
}  // namespace

int run_train_command(const TrainOptions& opt) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  if (opt.threads > 0) set_num_threads(opt.threads);
  const std::string data = opt.data.empty() ? default_digits_path() : opt.data;
  nn::Digits d = nn::load_digits(data);
  Generator gen(opt.seed);
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(32, 64, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(64 * 2 * 2, 10, true, &gen));
  nn::Adam optim(net.parameters(), opt.lr);
  nn::DataLoader loader(d.train_x, d.train_y, opt.batch_size, true, opt.seed + 1);
  std::printf("kiln train: digits %s (%lld train / %lld test rows), %d threads, seed %llu\n", data.c_str(),
              static_cast<long long>(d.train_x.size(0)), static_cast<long long>(d.test_x.size(0)), get_num_threads(),
              static_cast<unsigned long long>(opt.seed));
  const int64_t steps_per_epoch = (d.train_x.size(0) + opt.batch_size - 1) / opt.batch_size;
  const double total_steps = static_cast<double>(steps_per_epoch * opt.epochs);
  int64_t step = 0;
  Generator aug_gen(opt.seed + 2);
  for (int64_t epoch = 1; epoch <= opt.epochs; ++epoch) {
    const auto e0 = clock::now();
    double loss_sum = 0, correct = 0;
    int64_t seen = 0;
    for (auto& b : loader.epoch()) {
      // cosine decay of the learning rate over all steps
      optim.lr = opt.lr * 0.5 * (1.0 + std::cos(3.141592653589793 * static_cast<double>(step++) / total_steps));
      optim.zero_grad();
      Tensor xb = shift_augment(b.x, aug_gen);
      Tensor logits = net(xb);
      Tensor loss = nn::functional::cross_entropy(logits, b.y);
      loss.backward();
      optim.step();
      const int64_t n = b.x.size(0);
      loss_sum += loss.item<double>() * static_cast<double>(n);
      correct += logits.detach().argmax(1).eq(b.y).to(DType::f64).sum().item<double>();
      seen += n;
    }
    const double secs = std::chrono::duration<double>(clock::now() - e0).count();
    std::printf("epoch %3lld/%lld  loss %.4f  train acc %6.2f%%  %8.0f images/s\n", static_cast<long long>(epoch),
                static_cast<long long>(opt.epochs), loss_sum / static_cast<double>(seen),
                100.0 * correct / static_cast<double>(seen), static_cast<double>(seen) / secs);
    std::fflush(stdout);
  }
  const double test_acc = accuracy(net, d.test_x, d.test_y);
  nn::save_safetensors(opt.out, net.state_dict(), {{"model", "kiln digits cnn"}, {"format", "pt"}});
  const double total = std::chrono::duration<double>(clock::now() - t0).count();
  std::printf("test accuracy %.2f%% (%lld images)  time %.1f s  saved %s\n", 100.0 * test_acc,
              static_cast<long long>(d.test_x.size(0)), total, opt.out.c_str());
  if (!opt.export_path.empty()) export_onnx(net, d.test_x, opt.export_path);
  KILN_CHECK(opt.engine_path.empty() || !opt.export_path.empty(),
             "kiln train --engine needs --export (the engine is compiled from the exported ONNX file)");
  if (!opt.engine_path.empty()) {
    NoGradGuard ng;
    if (int rc = engine_stage(opt, d.test_x, d.test_y, test_acc)) return rc;
  }
  if (test_acc < opt.min_accuracy) {
    std::fprintf(stderr, "kiln train: test accuracy %.4f is below --min-accuracy %.4f\n", test_acc, opt.min_accuracy);
    return 1;
  }
  return 0;
}
