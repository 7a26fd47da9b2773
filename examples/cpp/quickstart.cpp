// The README's C++ quick start, built as build/quickstart_cpp and run by the capi suite:
// loads MODEL, feeds its first input a zero tensor of shape DIMS (e.g. 1x3x640x640), every other
// input zeros of its declared shape (unknown dims 1), and prints each output's shape. Errors are basalt::Error with a message naming what is wrong; exit 1.
#include <basalt/basalt.hpp>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: quickstart_cpp MODEL DIMS   (e.g. model.onnx 1x3x640x640)\n";
    return 2;
  }
  try {
    auto s = basalt::Session::open(argv[1]);
    basalt::Shape shape;
    for (std::string d = argv[2]; !d.empty();) {
      const size_t x = d.find('x');
      const std::string part = d.substr(0, x);
      if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos)
        throw std::runtime_error("DIMS '" + std::string(argv[2]) + "': '" + part + "' is not a dim");
      shape.push_back(std::stoll(part));
      d = x == std::string::npos ? "" : d.substr(x + 1);
    }
    std::vector<std::pair<std::string, basalt::Value>> feeds;
    for (const basalt::IoInfo& in : s->inputs()) {
      if (!feeds.empty()) {
        shape = in.shape;
        for (int64_t& d : shape) d = d < 0 ? 1 : d;
      }
      feeds.emplace_back(in.name, basalt::Tensor(in.dtype, shape));  // zero-filled
    }
    std::vector<basalt::Value> out = s->run(feeds);
    for (size_t i = 0; i < out.size(); ++i)
      std::cout << s->outputs()[i].name << " " << basalt::shape_str(out[i].tensor.shape()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
