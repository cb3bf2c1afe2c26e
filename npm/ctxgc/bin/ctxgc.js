#!/usr/bin/env node
// Starts the native `ctxgc` binary that the platform's package (@ctxgc/linux-x64, ...) carries,
// as Codex CLI's npm package does: npm installs only the optional dependency whose `os`, `cpu`
// and `libc` match the machine. Arguments, stdio and the exit status pass through; SIGINT,
// SIGTERM and SIGHUP go to the binary, so `ctxgc serve` shuts down gracefully.
"use strict";

const { spawn } = require("node:child_process");
const path = require("node:path");

// process.platform-process.arch -> the package that carries the binary for it.
const PACKAGES = {
  "linux-x64": "@ctxgc/linux-x64",
  "linux-arm64": "@ctxgc/linux-arm64",
  "darwin-x64": "@ctxgc/darwin-x64",
  "darwin-arm64": "@ctxgc/darwin-arm64",
  "win32-x64": "@ctxgc/win32-x64",
};

function isMusl() {
  if (process.platform !== "linux") return false;
  const report = process.report && process.report.getReport && process.report.getReport();
  return !(report && report.header && report.header.glibcVersionRuntime);
}

function binaryPath() {
  // A binary of one's own (a source build) takes precedence.
  if (process.env.CTXGC_BINARY) return process.env.CTXGC_BINARY;
  const platform = `${process.platform}-${process.arch}`;
  const name = PACKAGES[platform];
  if (!name || isMusl()) {
    const what = isMusl() ? `${platform} (musl)` : platform;
    throw new Error(
      `no prebuilt ctxgc for ${what}; build it from source (cargo install --git ` +
        `<repository> ctxgc-cli) and point CTXGC_BINARY at it`,
    );
  }
  let folder;
  try {
    folder = path.dirname(require.resolve(`${name}/package.json`));
  } catch {
    throw new Error(
      `${name} is not installed: npm skips optional dependencies when asked to ` +
        `(--omit=optional, --no-optional); reinstall ctxgc without that flag`,
    );
  }
  return path.join(folder, "bin", process.platform === "win32" ? "ctxgc.exe" : "ctxgc");
}

let binary;
try {
  binary = binaryPath();
} catch (error) {
  process.stderr.write(`ctxgc: ${error.message}\n`);
  process.exit(1);
}

const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
child.on("error", (error) => {
  process.stderr.write(`ctxgc: could not start ${binary}: ${error.message}\n`);
  process.exit(1);
});
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  });
}
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal, so a parent sees what the binary saw.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code === null ? 1 : code);
  }
});
