// Where library versions are read from (src/io/stack_source.cpp): --stack, an environment's
// dist-info folders, lock and requirements files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "cli/cli_harness.hpp"
#include "io/stack_source.hpp"

using namespace memplan;
using namespace memplan::io;
using memplan::testing::TempDir;

namespace {

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A venv's site-packages with one dist-info per (name, version): METADATA as pip writes it.
void install(const std::filesystem::path& site, const std::string& dist_name, const std::string& name,
             const std::string& ver) {
  write(site / (dist_name + "-" + ver + ".dist-info") / "METADATA",
        "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + ver + "\nSummary: x\n\nVersion: 0.0.0 in the body\n");
}

}  // namespace

TEST_CASE("--stack takes NAME==VERSION pairs and says what is wrong") {
  auto s = parse_stack_flag("transformers==4.48.1, trl=0.13.0,Liger_Kernel==0.8.0");
  REQUIRE(s);
  CHECK(s->stack.of(Library::kTransformers).text == "4.48.1");
  CHECK(s->stack.of(Library::kTrl).text == "0.13.0");
  CHECK(s->stack.of(Library::kLiger).text == "0.8.0");
  CHECK(s->origins.at(Library::kTrl).to_string() == "flag --stack");
  CHECK(parse_stack_flag("transformers").error().to_string() ==
        "--stack: expected NAME==VERSION, got \"transformers\"; e.g. --stack transformers==4.48.1,trl==0.13.0");
  CHECK(parse_stack_flag("transformer==4.48").error().to_string() ==
        "--stack: memplan has no rules for 'transformer'; did you mean 'transformers'?; the libraries whose "
        "versions change memory: torch, transformers, peft, trl, accelerate, bitsandbytes, deepspeed, liger-kernel, "
        "vllm, flash-attn, torchao");
  CHECK(parse_stack_flag("trl==latest").error().to_string() ==
        "--stack: trl: 'latest' is not a version; write a release number as pip shows it, e.g. 4.48.1");
}

TEST_CASE("the active environment's dist-info folders give the installed versions") {
  TempDir dir;
  const std::filesystem::path venv = std::filesystem::path(dir.path()) / "venv";
  const auto site = venv / "lib" / "python3.11" / "site-packages";
  install(site, "transformers", "transformers", "4.48.1");
  install(site, "trl", "trl", "0.13.0");
  install(site, "liger_kernel", "liger_kernel", "0.8.0");
  install(site, "numpy", "numpy", "2.0.0");
  write(venv / "bin" / "python", "");
  // An egg-info of an old setup.py install.
  write(site / "peft-0.11.1-py3.11.egg-info" / "PKG-INFO", "Metadata-Version: 1.0\nName: peft\nVersion: 0.11.1\n");

  SECTION("$VIRTUAL_ENV") {
    StackSearchEnv env;
    env.virtual_env = venv.string();
    env.path = "/nonexistent";
    auto s = find_environment_stack(env);
    REQUIRE(s);
    CHECK(s->stack.versions.size() == 4);
    CHECK(s->stack.of(Library::kTransformers).text == "4.48.1");
    CHECK(s->stack.of(Library::kLiger).text == "0.8.0");
    CHECK(s->stack.of(Library::kPeft).text == "0.11.1");
    CHECK(s->origins.at(Library::kTrl).to_string() ==
          "detected ($VIRTUAL_ENV " + venv.string() + ": trl-0.13.0.dist-info)");
  }
  SECTION("--python names the environment's interpreter, its folder or its site-packages") {
    for (const auto& p : {venv / "bin" / "python", venv, site}) {
      StackSearchEnv env;
      env.python = p.string();
      env.virtual_env = "/some/other/venv";  // --python wins over the active one
      auto s = find_environment_stack(env);
      REQUIRE(s);
      CHECK(s->stack.of(Library::kTrl).text == "0.13.0");
    }
    StackSearchEnv missing;
    missing.python = (venv / "bin" / "python9").string();
    CHECK(find_environment_stack(missing).error().to_string() ==
          "--python '" + missing.python +
              "' does not exist; give the environment's python (e.g. .venv/bin/python) or its folder");
  }
  SECTION("$CONDA_PREFIX, then the python3 on $PATH with the user's site-packages") {
    StackSearchEnv env;
    env.conda_prefix = venv.string();
    CHECK(find_environment_stack(env)->stack.of(Library::kTrl).text == "0.13.0");
    const auto bin = std::filesystem::path(dir.path()) / "sys" / "bin";
    write(bin / "python3", "#!/bin/sh\n");
    std::filesystem::permissions(bin / "python3", std::filesystem::perms::owner_all);
    install(std::filesystem::path(dir.path()) / "sys" / "lib" / "python3.11" / "site-packages", "torch", "torch", "2.4.1");
    install(std::filesystem::path(dir.path()) / "home" / ".local" / "lib" / "python3.11" / "site-packages", "trl",
            "trl", "0.19.0");
    StackSearchEnv path_env;
    path_env.path = "/nonexistent:" + bin.string();
    path_env.home = (std::filesystem::path(dir.path()) / "home").string();
    auto s = find_environment_stack(path_env);
    REQUIRE(s);
    CHECK(s->stack.of(Library::kTorch).text == "2.4.1");
    CHECK(s->stack.of(Library::kTrl).text == "0.19.0");
    CHECK(s->environment == "python3 on $PATH (" + (bin / "python3").string() + ")");
  }
}

TEST_CASE("requirements files pin with == only") {
  const auto s = parse_requirements(
      "# training\n--extra-index-url https://example.invalid\ntorch==2.4.1+cu121\ntransformers[torch] == 4.48.1 ; "
      "python_version >= '3.9'\npeft>=0.13\ntrl===0.13.0  # pinned\naccelerate==1.0.*\ndeepspeed==0.15,<0.16\n-e .\n",
      "requirements.txt");
  CHECK(s.stack.versions.size() == 3);
  CHECK(s.stack.of(Library::kTorch).text == "2.4.1+cu121");
  CHECK(s.origins.at(Library::kTorch).to_string() == "requirements.txt:3");
  CHECK(s.origins.at(Library::kTransformers).to_string() == "requirements.txt:4");
  CHECK(s.stack.of(Library::kTrl).text == "0.13.0");
  CHECK_FALSE(s.stack.has(Library::kPeft));
}

TEST_CASE("uv.lock, poetry.lock, pyproject.toml, environment.yml and pixi.lock") {
  const auto uv = parse_lock_toml(
      "version = 1\n\n[[package]]\nname = \"numpy\"\nversion = \"2.0.0\"\n\n[[package]]\nname = \"torch\"\n"
      "version = \"2.4.1\"\nsource = { registry = \"https://pypi.org/simple\" }\n\n[package.optional-dependencies]\n"
      "version = \"9.9\"\n\n[[package]]\nname = \"trl\"\nversion = \"0.13.0\"\n",
      "uv.lock");
  CHECK(uv.stack.versions.size() == 2);
  CHECK(uv.origins.at(Library::kTorch).to_string() == "uv.lock:9");
  CHECK(uv.stack.of(Library::kTrl).text == "0.13.0");

  const auto py = parse_pyproject(
      "[project]\nname = \"x\"\ndependencies = [\n  \"torch==2.4.1\",\n  \"transformers>=4.48\",\n]\n"
      "[tool.poetry.dependencies]\npeft = \"0.13.2\"\ntrl = \"^0.13\"\n",
      "pyproject.toml");
  CHECK(py.stack.versions.size() == 2);
  CHECK(py.stack.of(Library::kTorch).text == "2.4.1");
  CHECK(py.stack.of(Library::kPeft).text == "0.13.2");
  CHECK(py.origins.at(Library::kPeft).to_string() == "pyproject.toml:8");

  const auto conda = parse_conda_yaml(
      "name: train\ndependencies:\n  - python=3.11\n  - pytorch::pytorch=2.4.1=py3.11_cuda12.1_cudnn9_0\n"
      "  - bitsandbytes>=0.43\n  - pip:\n    - transformers==4.48.1\n",
      "environment.yml");
  CHECK(conda.stack.versions.size() == 2);
  CHECK(conda.stack.of(Library::kTorch).text == "2.4.1");
  CHECK(conda.origins.at(Library::kTorch).to_string() == "environment.yml:4");
  CHECK(conda.stack.of(Library::kTransformers).text == "4.48.1");

  const auto pixi = parse_conda_yaml(
      "version: 6\npackages:\n- pypi: https://files.example.invalid/torch-2.5.1.whl\n  name: torch\n  version: 2.5.1\n",
      "pixi.lock");
  CHECK(pixi.stack.of(Library::kTorch).text == "2.5.1");
  CHECK(pixi.origins.at(Library::kTorch).to_string() == "pixi.lock:5");
}

TEST_CASE("lock files are found beside the config and at its repository's root") {
  TempDir dir;
  const std::filesystem::path repo = std::filesystem::path(dir.path()) / "repo";
  std::filesystem::create_directories(repo / ".git");
  write(repo / "uv.lock", "[[package]]\nname = \"transformers\"\nversion = \"4.48.1\"\n");
  write(repo / "configs" / "requirements-train.txt", "trl==0.13.0\ntransformers==4.57.0\n");
  write(repo / "configs" / "sft.yaml", "per_device_train_batch_size: 2\n");
  const auto s = find_locked_stack({(repo / "configs" / "sft.yaml").string()});
  // Beside the config first: its requirements pin transformers 4.57.0 before the root's uv.lock.
  CHECK(s.stack.of(Library::kTrl).text == "0.13.0");
  CHECK(s.stack.of(Library::kTransformers).text == "4.57.0");
  CHECK(s.origins.at(Library::kTransformers).to_string() ==
        (repo / "configs" / "requirements-train.txt").string() + ":2");
  // Without the requirements file, the repository root's uv.lock.
  std::filesystem::remove(repo / "configs" / "requirements-train.txt");
  const auto root = find_locked_stack({(repo / "configs" / "sft.yaml").string()});
  CHECK(root.stack.of(Library::kTransformers).text == "4.48.1");
  CHECK(root.origins.at(Library::kTransformers).to_string() == (repo / "uv.lock").string() + ":3");
}
