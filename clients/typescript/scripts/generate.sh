#!/usr/bin/env bash
# Regenerates everything generated in this package: the TypeScript stubs in src/gen/ from
# ../../protos (buf and ts-proto, pinned in package-lock.json), and the verifier's test vectors
# in test/fixtures/ from the Python reference ($PYTHON, default python3, with Cairn installed).
set -euo pipefail
python=${PYTHON:-python3}
if [[ "$python" == */* ]]; then
  # A relative path is relative to where we were called from; lib.sh changes directory.
  python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
fi
source "$(dirname "$0")/lib.sh"
npx --no-install buf generate
"$python" scripts/make_verify_vectors.py >/dev/null
