# Sourced by the scripts beside it: cd to the package, hold its build lock, and install its
# pinned tools from package-lock.json when node_modules is missing or older than the lock file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v node >/dev/null 2>&1; then
  echo "clients/typescript: node is not on PATH; Node.js 20 or newer is needed" >&2
  exit 1
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "clients/typescript: Node.js 20 or newer is needed, found $(node --version)" >&2
  exit 1
fi

# One build at a time in this tree (pytest and ./dev may run side by side).
exec 9>.build.lock
flock 9

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
