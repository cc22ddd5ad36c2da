// Storage: the bytes behind tensors, shared by every view, with the version counter that in-place
// writes bump (Note [Version counter] in src/core/storage.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>

#include "kiln/core/device.h"

namespace kiln {

// Where and by what the storage was last written in place; autograd reads it to explain a
// version mismatch.
struct WriteRecord {
  const char* op = nullptr;  // "mul_", "copy_", ... (static string)
  std::source_location site;
};

class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Device device);               // owns memory from allocator_for(device)
  StorageImpl(void* data, size_t nbytes, Device device,    // borrows memory; `release` frees it
              std::shared_ptr<void> keep_alive);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  const WriteRecord& last_write() const { return last_write_; }
  void bump_version(const char* op, std::source_location site) {
    ++version_;
    last_write_ = WriteRecord{op, site};
  }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
  std::shared_ptr<void> keep_alive_;
  uint64_t version_ = 0;
  WriteRecord last_write_;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace kiln
