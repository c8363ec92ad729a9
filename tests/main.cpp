#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdlib>

namespace {

// The tests read no library versions from the machine they run on: the active Python environment
// is an empty one, as if memplan ran inside a fresh venv (io/stack_source.hpp). A test that wants
// versions gives --stack, --python or sets $VIRTUAL_ENV itself.
const bool hermetic_stack = [] {
  ::setenv("VIRTUAL_ENV", "/nonexistent/memplan-tests-venv", 1);
  ::unsetenv("CONDA_PREFIX");
  ::unsetenv("PYTORCH_ALLOC_CONF");
  return true;
}();

}  // namespace
