#!/usr/bin/env bash
# The npm packages of the browser and dashboard tests, pinned in
# crates/meshbench/tests/it/browser/package.json and package-lock.json: playwright-core (drives
# Debian's Chromium for tests/it/web.rs; it downloads no browser), @grafana/schema and typescript
# (type-check the Grafana dashboard for tests/it/grafana.rs). Installs Node.js from Debian when
# there is none. Does nothing when the pinned versions are already installed. About 40 MB, once.
set -euo pipefail
dir="$(cd "$(dirname "$0")/../crates/meshbench/tests/it/browser" && pwd)"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "installing: nodejs npm" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends nodejs npm >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends nodejs npm >/dev/null; }
fi
# Installed, and at the versions the lock file pins?
installed() {
  node -e '
    const fs = require("fs"), path = require("path");
    const dir = process.argv[1];
    const lock = JSON.parse(fs.readFileSync(path.join(dir, "package-lock.json"), "utf8"));
    for (const [where, pkg] of Object.entries(lock.packages)) {
      if (!where) continue;
      const file = path.join(dir, where, "package.json");
      if (!fs.existsSync(file) || JSON.parse(fs.readFileSync(file, "utf8")).version !== pkg.version) process.exit(1);
    }' "$dir"
}
if installed; then
  exit 0
fi
echo "installing the browser tests' npm packages into $dir/node_modules" >&2
# No install scripts are needed (and none may fetch a browser).
(cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
installed || { echo "install-web-test: the packages in $dir/node_modules do not match package-lock.json" >&2; exit 1; }
