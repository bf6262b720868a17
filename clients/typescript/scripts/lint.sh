#!/usr/bin/env bash
# Type-checks the package and checks its formatting (prettier; src/gen is left as generated).
source "$(dirname "$0")/lib.sh"
npx --no-install tsc -p . --noEmit
npx --no-install prettier --check --log-level=warn .
