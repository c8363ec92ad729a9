// Where the library versions of a run come from, without running Python (docs/configs.md#stack):
// `--stack NAME==VERSION,...`; the active Python environment's installed distributions
// (`--python PATH`, $VIRTUAL_ENV, $CONDA_PREFIX, else the python3 on $PATH), read from their
// `*.dist-info/METADATA`; then the lock or requirements file beside the config or at the root of
// its repository (uv.lock, poetry.lock, pixi.lock, requirements*.txt, environment.yml,
// pyproject.toml). Each library is taken from the first of these that names it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/inputs.hpp"
#include "memplan/result.hpp"
#include "memplan/stack.hpp"

namespace memplan::io {

struct StackSearchEnv {
  std::string python;        // --python: a Python executable, an environment's prefix or a site-packages folder
  std::string virtual_env;   // $VIRTUAL_ENV (venv, virtualenv, uv, poetry shells)
  std::string conda_prefix;  // $CONDA_PREFIX
  std::string path;          // $PATH: its first python3 when no environment is active
  std::string home;          // $HOME: the user site-packages of that python3
  static StackSearchEnv from_process();
};

// The versions found, each with where it came from.
struct StackSources {
  Stack stack;
  std::map<Library, Origin> origins;
  std::vector<std::string> warnings;
  std::string environment;  // the environment read ("" when none): "$VIRTUAL_ENV /srv/venv"

  // Adds what `other` has and this lacks (the earlier source wins).
  void fill_from(const StackSources& other);
};

// "--stack transformers==4.48.1,trl==0.13.0": `=` or `==`, names as pip writes them.
Result<StackSources> parse_stack_flag(const std::string& text);

// The installed distributions of the active environment (the first of --python, $VIRTUAL_ENV,
// $CONDA_PREFIX and the python3 on $PATH that exists). `--python` that does not exist is an error.
Result<StackSources> find_environment_stack(const StackSearchEnv& env);

// The pins of the lock and requirements files beside each config file and at its repository's
// root (the nearest folder above it holding .git).
StackSources find_locked_stack(const std::vector<std::string>& config_paths);

// Parsers of one file's text, for the finder and the tests: the libraries it pins, at their lines.
StackSources parse_requirements(const std::string& text, const std::string& path);
StackSources parse_lock_toml(const std::string& text, const std::string& path);  // uv.lock, poetry.lock
StackSources parse_pyproject(const std::string& text, const std::string& path);
StackSources parse_conda_yaml(const std::string& text, const std::string& path);  // environment.yml, pixi.lock

}  // namespace memplan::io
