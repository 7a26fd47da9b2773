// NumPy .npy files (format versions 1-3, little-endian, C order) <-> Tensor.
#pragma once

#include <basalt/tensor.hpp>

#include <string>
#include <utility>
#include <vector>

namespace basalt {

Tensor read_npy(const std::string& path);          // throws Error(InvalidArgument/Io) naming the file
Tensor parse_npy(const std::vector<char>& bytes, const std::string& name);  // errors name `name`
// The arrays of a .npz (np.savez / np.savez_compressed: a zip of .npy files, stored or deflated),
// in archive order, named without ".npy". Errors name the file and entry.
std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);

}  // namespace basalt
