// NumPy .npy files (format versions 1-3, little-endian, C order) <-> Tensor.
#pragma once

#include <basalt/tensor.hpp>

#include <string>

namespace basalt {

Tensor read_npy(const std::string& path);          // throws Error(InvalidArgument/Io) naming the file
void write_npy(const std::string& path, const Tensor& t);

}  // namespace basalt
