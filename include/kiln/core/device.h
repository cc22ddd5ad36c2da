// Where a tensor's bytes live.
#pragma once

#include <ostream>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT
  static constexpr Device cpu() { return Device(DeviceType::cpu); }
  static constexpr Device cuda(int i = 0) { return Device(DeviceType::cuda, i); }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

std::ostream& operator<<(std::ostream& os, Device d);

// True when kiln was built with CUDA and a GPU is visible at run time.
bool cuda_available();

}  // namespace kiln
