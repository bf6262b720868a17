#!/usr/bin/env bash
# Installs the pinned dependencies when needed and compiles src/, test/ and smoke/ to dist/.
source "$(dirname "$0")/lib.sh"
npx --no-install tsc -p .
