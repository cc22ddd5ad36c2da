// .npy and .npz files, readable and writable by NumPy (format versions 1.0-3.0; npz stored or
// deflated). Errors name the file and what is wrong with it.
#pragma once

#include <map>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor load_npy(const std::string& path);
void save_npy(const std::string& path, const Tensor& t);
// Entries by name (without the ".npy" suffix NumPy adds inside the archive).
std::map<std::string, Tensor> load_npz(const std::string& path);
void save_npz(const std::string& path, const std::map<std::string, Tensor>& tensors);  // stored, like np.savez
// Deflate-compressed entries, like np.savez_compressed.
void save_npz_compressed(const std::string& path, const std::map<std::string, Tensor>& tensors);

// In-memory forms, for tests and the runtime.
Tensor parse_npy(const std::string& bytes, const std::string& what = "<memory>");
std::string serialize_npy(const Tensor& t);

}  // namespace kiln
