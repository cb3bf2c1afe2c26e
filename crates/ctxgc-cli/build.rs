//! `ctxgc --version` names the commit it was built from: `CTXGC_COMMIT` when the build says
//! (a release machine, a source tarball), else `git rev-parse` of the checkout, else
//! "unknown commit" (a build outside a checkout). Nothing else of the environment goes in.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CTXGC_COMMIT");
    // The checkout's HEAD moves with each commit; its ref file with each commit on a branch.
    for path in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/packed-refs",
    ] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let commit = std::env::var("CTXGC_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "unknown commit".to_owned());
    println!("cargo:rustc-env=CTXGC_COMMIT={commit}");
}
