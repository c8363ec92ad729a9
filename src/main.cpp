#include <iostream>
#include <string>
#include <vector>

#include "cli/allocator.hpp"
#include "cli/app.hpp"

int main(int argc, char** argv) {
  memplan::cli::tune_allocator();
  std::vector<std::string> args(argv + 1, argv + argc);
  return memplan::cli::run(args, std::cout, std::cerr);
}
