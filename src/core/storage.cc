// Note [Version counter]
// Every Storage counts in-place writes. Views share the Storage, so a write through any view is
// seen by all. Autograd records the version of each tensor it saves and compares at backward; the
// last write's op name and call site are kept so the mismatch error can say who changed it.
#include "kiln/core/storage.h"

#include "kiln/core/allocator.h"

namespace kiln {

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device).allocate(nbytes);
}

StorageImpl::StorageImpl(void* data, size_t nbytes, Device device, std::shared_ptr<void> keep_alive)
    : data_(data), nbytes_(nbytes), device_(device), owned_(false), keep_alive_(std::move(keep_alive)) {}

StorageImpl::~StorageImpl() {
  if (owned_ && data_) allocator_for(device_).deallocate(data_, nbytes_);
}

}  // namespace kiln
