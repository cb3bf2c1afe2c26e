//! Finding and loading `ctxgc.toml`.

use std::path::Path;

use anyhow::{Context, Result};
use ctxgc_core::config::Config;

/// The file named by `--config`, else `./ctxgc.toml` when it exists, else the defaults.
pub fn load(explicit: Option<&Path>) -> Result<Config> {
    let path = match explicit {
        Some(path) => path.to_owned(),
        None => {
            let local = Path::new("ctxgc.toml");
            if !local.is_file() {
                return Ok(Config::default());
            }
            local.to_owned()
        }
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read configuration file {}", path.display()))?;
    Config::from_toml(&text).with_context(|| format!("in {}", path.display()))
}
