#include "kiln/core/device.h"

namespace kiln {

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

namespace detail {
// Set by kernels/cuda when it is linked in and finds a GPU.
bool (*g_cuda_available)() = nullptr;
}  // namespace detail

bool cuda_available() { return detail::g_cuda_available && detail::g_cuda_available(); }

}  // namespace kiln
