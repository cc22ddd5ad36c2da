// DataLoader (seeded shuffling, batching) and the digits CSV reader with its fixed split.
#include <fstream>
#include <numeric>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/core/error.h"
#include "kiln/nn.h"
#include "kiln/ops/index.h"

namespace kiln::nn {

DataLoader::DataLoader(Tensor x, Tensor y, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last)
    : x_(std::move(x)), y_(std::move(y)), batch_(batch_size), shuffle_(shuffle), drop_last_(drop_last), gen_(seed) {
  KILN_CHECK(batch_size > 0, "DataLoader: batch_size must be positive, got ", batch_size);
  KILN_CHECK(x_.dim() >= 1 && y_.dim() >= 1 && x_.size(0) == y_.size(0), "DataLoader: x and y must have the same ",
             "first dim, got shapes ", shape_str(x_.shape()), " and ", shape_str(y_.shape()));
}

std::vector<Batch> DataLoader::epoch() {
  const int64_t n = x_.size(0);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle_)  // Fisher-Yates with the loader's own generator
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(gen_.next_u64() % static_cast<uint64_t>(i + 1))]);
  std::vector<Batch> out;
  NoGradGuard ng;
  for (int64_t b = 0; b < n; b += batch_) {
    const int64_t e = std::min(n, b + batch_);
    if (drop_last_ && e - b < batch_) break;
    Tensor idx = empty({e - b}, DType::i64);
    for (int64_t i = b; i < e; ++i) idx.data<int64_t>()[i - b] = order[static_cast<size_t>(i)];
    out.push_back({index_select(x_, 0, idx), index_select(y_, 0, idx)});
  }
  return out;
}

Digits load_digits(const std::string& path) {
  std::ifstream in(path);
  KILN_CHECK(in.good(), "load_digits: cannot open '", path, "'");
  constexpr int64_t kRows = 1797, kTrain = 1437, kPix = 64;
  Tensor x = empty({kRows, 1, 8, 8}), y = empty({kRows}, DType::i64);
  float* xp = x.data<float>();
  int64_t* yp = y.data<int64_t>();
  std::string line;
  int64_t row = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    KILN_CHECK(row < kRows, "load_digits: '", path, "' has more than ", kRows, " rows");
    std::stringstream ss(line);
    std::string cell;
    int64_t col = 0;
    while (std::getline(ss, cell, ',')) {
      double v = 0;
      try {
        v = std::stod(cell);
      } catch (const std::exception&) {
        KILN_FAIL("load_digits: '", path, "' row ", row + 1, " column ", col + 1, ": not a number: '", cell, "'");
      }
      if (col < kPix) {
        KILN_CHECK(v >= 0 && v <= 16, "load_digits: '", path, "' row ", row + 1, ": pixel ", v, " outside 0..16");
        xp[row * kPix + col] = static_cast<float>(v / 16.0);
      } else if (col == kPix) {
        KILN_CHECK(v >= 0 && v <= 9 && v == static_cast<int64_t>(v), "load_digits: '", path, "' row ", row + 1,
                   ": label ", v, " outside 0..9");
        yp[row] = static_cast<int64_t>(v);
      }
      ++col;
    }
    KILN_CHECK(col == kPix + 1, "load_digits: '", path, "' row ", row + 1, " has ", col, " values, expected 65");
    ++row;
  }
  KILN_CHECK(row == kRows, "load_digits: '", path, "' has ", row, " rows, expected ", kRows);
  return {x.slice(0, 0, kTrain).contiguous(), y.slice(0, 0, kTrain).contiguous(),
          x.slice(0, kTrain, kRows).contiguous(), y.slice(0, kTrain, kRows).contiguous()};
}

}  // namespace kiln::nn
