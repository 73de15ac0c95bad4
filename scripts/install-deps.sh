#!/usr/bin/env bash
# Installs the Debian 12 packages memo needs (idempotent: installs only what is missing).
# Usage: scripts/install-deps.sh [--test]   (--test adds what the test suite needs: PyTorch,
# clang-format)
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libopenblas-dev libdnnl-dev coinor-libcbc-dev nlohmann-json3-dev
      libcli11-dev libtomlplusplus-dev libgtest-dev libpcre2-dev libutf8proc-dev libopenmpi-dev openmpi-bin bible-kjv bible-kjv-text)
if [[ "${1:-}" == "--test" ]]; then pkgs+=(python3-torch python3-numpy clang-format); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "memo: installing ${missing[*]}"
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
