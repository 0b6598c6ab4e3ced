#!/usr/bin/env bash
# Installs the bench-only peers (node-llama-cpp 3.21.1 with its linux-x64 CPU prebuild) into
# bench/peers/node_modules. Its install scripts never run (they would try to download or build
# llama.cpp); optional prebuilds (CUDA, Vulkan, other platforms: ~730 MB) are left out.
# Usage: bash bench/peers/install.sh   (idempotent; prints the installed size)
set -euo pipefail
cd "$(dirname "$0")"
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "bench/peers: only the linux-x64 CPU prebuild is pinned here; on $(uname -s)-$(uname -m) add the matching @node-llama-cpp/* 3.21.1 package" >&2
  exit 1
fi
start=$(date +%s)
npm ci --no-audit --no-fund --omit=optional --ignore-scripts
node -e "import('node-llama-cpp').then(() => console.log('node-llama-cpp loads'))"
echo "bench/peers: installed in $(( $(date +%s) - start )) s, $(du -sh node_modules | cut -f1) in node_modules"
