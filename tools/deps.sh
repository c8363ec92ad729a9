#!/usr/bin/env bash
# Installs the Debian packages memplan needs to build and test, when they are missing.
# Sourced by tools/bootstrap.sh and tools/test.sh.
memplan_install_deps() {
  # Building and testing need only these (python3: the stand-in training commands of
  # tests/cli/test_cmd_profile.cpp); tools/measure (python3-torch) and bench/
  # (libbenchmark-dev) install theirs with `memplan_install_deps python3-torch` etc.
  local pkgs=(cmake g++ make libcli11-dev nlohmann-json3-dev libfmt-dev libyaml-cpp-dev catch2 python3 "$@")
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  echo "memplan: installing missing packages: ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
