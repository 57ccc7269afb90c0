#!/usr/bin/env bash
# Fails when a tracked C, header or CUDA file differs from .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ ${#files[@]} -eq 0 ]; then
    exit 0
fi
if ! clang-format --dry-run -Werror "${files[@]}"; then
    echo "check-format: run 'clang-format -i' on the files above" >&2
    exit 1
fi
echo "check-format: ${#files[@]} files formatted"
