//! `ctxgc serve` and `ctxgc stats`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_core::config::Config;
use ctxgc_core::store::{MemoryStore, OriginalStore, Store};
use ctxgc_proxy::{AppState, ProxySettings, RewriteSettings};
use ctxgc_store::{RedisOptions, RedisStore, SqliteStore, redact_redis_url};

use super::summarizer::SummarizerArgs;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,
    /// Allow listening on a non-loopback address (the proxy forwards API keys it receives).
    #[arg(long)]
    pub allow_remote: bool,
    /// OpenAI-compatible upstream (Chat Completions, Responses and everything not Anthropic).
    #[arg(long, default_value = "https://api.openai.com")]
    pub openai_upstream: String,
    /// Anthropic upstream.
    #[arg(long, default_value = "https://api.anthropic.com")]
    pub anthropic_upstream: String,
    /// Gemini upstream (`generateContent`, `streamGenerateContent`, `countTokens`).
    #[arg(long, default_value = ctxgc_proxy::GEMINI_UPSTREAM)]
    pub gemini_upstream: String,
    /// Where originals go: `sqlite:PATH` (default: the XDG data dir),
    /// `redis://[user:password@]HOST:PORT[/DB]` or `rediss://...` (TLS; `[store] redis_ca_file`)
    /// (shared by several replicas) or `memory`.
    #[arg(long)]
    pub store: Option<String>,
    /// The models' context window in tokens (limits scale with it; default from the config).
    #[arg(long, value_parser = super::parse_window)]
    pub window: Option<u64>,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Do not add Anthropic cache breakpoints to requests that carry none.
    #[arg(long)]
    pub no_cache_breakpoints: bool,
    /// Do not set OpenAI's prompt_cache_key when absent.
    #[arg(long)]
    pub no_prompt_cache_key: bool,
    /// Run the engine's events (prune first, then compaction) across requests (also
    /// `[proxy] compact = true`).
    #[arg(long)]
    pub compact: bool,
    /// Leave histories whole: no events across requests, not even after the cache went cold
    /// (overrides `[proxy] compact = true` and `cold_events = true`).
    #[arg(long, conflicts_with = "compact")]
    pub no_compact: bool,
    /// Observe mode: forward every request unchanged and compute beside it what ctxgc would have
    /// sent, to see what it would save before letting it change anything (also
    /// `[proxy] observe = true`).
    #[arg(long)]
    pub observe: bool,
    /// Engine preset: `safe` (the default) or `lean` (masks tool outputs older than the newest
    /// 10 turns in batches that pay for their cache write, keeps half as much of each output as
    /// `safe` keeps at a 32K window whatever the window, runs events on any request); replaces
    /// the file's `[engine] preset`.
    #[arg(long, value_parser = parse_preset)]
    pub preset: Option<ctxgc_core::engine::Preset>,
    /// Add trim_tool_result and recall_tool_result to requests that carry tools and run the
    /// model's calls to them inside the proxy (also `[proxy] inject_tools = true`).
    #[arg(long)]
    pub inject_tools: bool,
    /// How log lines are written to stderr: `text` for people, `json` (one object a line) for
    /// log shippers. Levels and targets come from `RUST_LOG` (default `info`).
    #[arg(long, value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,
    /// Who writes compaction summaries (with --compact). On a summarizer failure the request is
    /// forwarded unchanged and later compactions are extractive for `[engine] llm_cooldown_secs`.
    #[command(flatten)]
    pub summarizer: SummarizerArgs,
}

/// A store write past `ulimit -f` raises SIGXFSZ, whose default action kills the process;
/// ignored, the write fails with EFBIG, and the request fails open like any store failure.
fn survive_file_size_limits() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code; it is done
    // once, before the server starts any thread that writes files.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The store `--store SPEC` names: `sqlite:PATH` (default: the XDG data dir), `memory`,
/// `redis://...` or `rediss://...`; memory and SQLite kept within `max_bytes` when given.
pub(crate) fn open_store(
    spec: Option<&str>,
    config: &Config,
    max_bytes: Option<u64>,
) -> Result<Box<dyn Store>> {
    let (retention, timeout) = (config.store.retention(), config.store.timeout());
    let sqlite = |path: &std::path::Path| -> Result<Box<dyn Store>> {
        let store = SqliteStore::open_with_timeout(path, timeout)?;
        Ok(Box::new(match max_bytes {
            Some(max) => store.with_max_bytes(max)?,
            None => store,
        }))
    };
    Ok(match spec {
        None => sqlite(&SqliteStore::default_path())?,
        Some("memory") => Box::new(match max_bytes {
            Some(max) => MemoryStore::bounded(max),
            None => MemoryStore::default(),
        }),
        Some(spec) if spec.starts_with("sqlite:") => {
            sqlite(std::path::Path::new(&spec["sqlite:".len()..]))?
        }
        Some(spec) if spec.starts_with("redis://") || spec.starts_with("rediss://") => {
            // TLS needs the process's crypto provider before the first connection.
            ctxgc_summarize::install_crypto();
            Box::new(
                RedisStore::connect_with(
                    spec,
                    RedisOptions {
                        timeout,
                        key_prefix: config.store.redis_key_prefix.clone(),
                        ca_file: config.store.redis_ca_file.clone(),
                        retention: Some(retention),
                    },
                )
                .with_context(|| format!("--store {}", redact_redis_url(spec)))?,
            )
        }
        Some(spec) => {
            bail!(
                "--store must be sqlite:PATH, redis://[user:password@]HOST:PORT[/DB], rediss://... or memory, not `{}`",
                redact_redis_url(spec)
            )
        }
    })
}

/// Allocator settings for a long-running server, measured with `scripts/soak.sh`:
/// - glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so request
///   bodies of megabytes end up on the heap, whose fragments stay resident: the proxy's memory
///   grew steadily under a steady load. With the threshold fixed at 1 MiB, larger blocks are
///   mapped and returned when freed. (Fixed at glibc's default 128 KiB, every body of a few
///   hundred KB was mapped and zero-filled anew: the added latency at 100K tokens went from
///   0.7 to 1.7 ms, `scripts/bench-proxy.sh`.)
/// - glibc gives each thread that allocates its own arena (up to 8 per core), and each keeps
///   its own free fragments: with the blocking pool's threads, two arenas cut the steady
///   resident memory from 118 MB to 82 MB (peak 142 -> 104 MB) at the same throughput.
/// - Fixing the mmap threshold also fixes the trim threshold, at 128 KiB by default: a request
///   of 100K tokens frees about 2 MB at the top of its arena, which went back to the system
///   and was faulted in again by the next request (150 page faults per request, and each
///   return a TLB shootdown across the cores: a millisecond of CPU per request on a 2-core
///   VM). Each arena keeps 4 MiB at its top instead: 1 to 3 page faults per request, the
///   added latency at 100K tokens down by about 0.4 ms, for at most 8 MiB more resident
///   (the soak's steady memory 101 -> 105 MB). 1 and 2 MiB kept most of the faults.
/// - (mimalloc instead of glibc made a request of 40,000 small results 30% faster, but kept
///   its threads' freed pages: the soak's steady resident memory went from 85 MB to 273 MB.)
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator settings; it is called once, before the server
    // starts any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Returns the allocator's free memory to the system.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn parse_preset(name: &str) -> Result<ctxgc_core::engine::Preset, String> {
    ctxgc_core::engine::Preset::parse(name)
        .ok_or_else(|| format!("unknown preset `{name}` (expected safe or lean)"))
}

pub fn run(config: &Config, args: ServeArgs) -> Result<ExitCode> {
    let mut config = config.clone();
    if let Some(preset) = args.preset {
        config.apply_preset(preset);
    }
    let config = &config;
    survive_file_size_limits();
    tune_allocator();
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        bail!(
            "refusing to listen on {} (not loopback): the proxy forwards the API keys it receives; pass --allow-remote to do it anyway",
            args.listen
        );
    }
    let retention = config.store.retention();
    // `[store] max_mb`: 0 is no bound.
    let max_bytes = (config.store.max_mb > 0).then(|| config.store.max_mb.saturating_mul(1 << 20));
    let store = open_store(args.store.as_deref(), config, max_bytes)?;
    let compact = (config.proxy.compact || args.compact) && !args.no_compact;
    let cold_events = config.proxy.cold_events && !args.no_compact;
    let inject_tools = config.proxy.inject_tools || args.inject_tools;
    let mut policy = config.engine.clone();
    // A summary names only the ways back the model has: without the injected tools it has
    // no `recall_tool_result` (a hint the user configured stays).
    if !inject_tools && policy.recall_hint == ctxgc_core::engine::policy::RECALL_TOOL_HINT {
        policy.recall_hint.clear();
    }
    let settings = ProxySettings {
        openai_upstream: args.openai_upstream,
        anthropic_upstream: args.anthropic_upstream,
        gemini_upstream: args.gemini_upstream,
        max_body_bytes: args.max_body_bytes,
        observe: config.proxy.observe || args.observe,
        rewrite: RewriteSettings {
            cache: config.cache.clone(),
            trim: config.trim.clone(),
            window: args.window.unwrap_or(config.trim.default_window),
            model_windows: config.proxy.model_windows && args.window.is_none(),
            cache_breakpoints: config.proxy.cache_breakpoints && !args.no_cache_breakpoints,
            prompt_cache_key: config.proxy.prompt_cache_key && !args.no_prompt_cache_key,
            engine: (compact || cold_events).then_some(policy),
            events_only_when_cold: !compact,
            inject_tools,
        },
        summarizer: args.summarizer.llm()?.map(Arc::new),
        summarizer_cooldown: Duration::from_secs(config.engine.llm_cooldown_secs),
        tenant_secret: config.proxy.tenant_secret.clone(),
        admin_token: config.proxy.admin_token.clone(),
        timeouts: ctxgc_proxy::Timeouts {
            connect: Duration::from_secs(config.proxy.connect_timeout_secs),
            upstream_idle: Duration::from_secs(config.proxy.upstream_idle_timeout_secs),
            client_body: Duration::from_secs(config.proxy.client_body_timeout_secs),
            client_headers: Duration::from_secs(config.proxy.client_header_timeout_secs),
            shutdown_grace: Duration::from_secs(config.proxy.shutdown_grace_secs),
        },
        tokens: config.tokens.clone(),
        limits: ctxgc_proxy::Limits {
            rewrite_deadline: Duration::from_millis(config.proxy.rewrite_deadline_ms),
            inflight_bytes: (config.proxy.inflight_memory_mb as usize).saturating_mul(1 << 20),
        },
        keepalive: Default::default(),
    };
    crate::logging::init(args.log_format)?;
    let gone = store.expire(retention)?;
    if gone > 0 {
        tracing::info!(
            gone,
            retention_days = config.store.retention_days,
            "originals and states past the retention deleted"
        );
    }
    let state = AppState::new(settings, store).map_err(anyhow::Error::msg)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Blocking work (parses, rewrites, store calls) is bounded by the rewrite slots and
        // the memory budget; this bounds the threads (each with its allocator heap) a burst
        // of connections can start.
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
        .context("cannot start the runtime")?;
    // What outlives the retention goes every hour too, off the request path.
    let expiring = state.clone();
    runtime.spawn(async move {
        let mut hourly = tokio::time::interval(Duration::from_secs(3_600));
        hourly.tick().await;
        loop {
            hourly.tick().await;
            let state = expiring.clone();
            let _ = tokio::task::spawn_blocking(move || state.expire(retention)).await;
        }
    });
    // Memory goes back to the system once the load is gone: glibc keeps freed pages of its
    // arenas resident until they are trimmed (a burst of 30 MB requests left ~770 MB resident
    // when idle).
    let trimmed = state.clone();
    runtime.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        let mut seen = 0;
        loop {
            every.tick().await;
            let (idle, received) = trimmed.idle();
            if idle && received != seen {
                seen = received;
                give_memory_back();
            }
        }
    });
    let served = state.clone();
    runtime
        .block_on(async {
            let listener = tokio::net::TcpListener::bind(args.listen).await?;
            tracing::info!(address = %listener.local_addr()?, "listening");
            ctxgc_proxy::serve_until(listener, state, shutdown_signal()).await
        })
        .with_context(|| format!("cannot serve on {}", args.listen))?;
    // A supervisor can tell a clean stop from one that cut answers short.
    Ok(match served.streams_cut() {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(STREAMS_CUT_EXIT),
    })
}

/// Threads for blocking work, at most.
const MAX_BLOCKING_THREADS: usize = 32;

/// The exit status of a `serve` that cut answers still open at the end of its shutdown grace.
pub const STREAMS_CUT_EXIT: u8 = 3;

/// SIGTERM (a deploy, a container stop) or Ctrl-C.
async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("interrupted"),
        () = terminate => tracing::info!("terminated"),
    }
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// The SQLite store (default: the one `ctxgc serve` uses).
    #[arg(long, value_name = "sqlite:PATH")]
    pub store: Option<String>,
}

/// `ctxgc gc`: deletes what outlived `[store] retention_days` and compacts the SQLite file.
pub fn gc(config: &Config, args: GcArgs) -> Result<ExitCode> {
    let path = match args.store.as_deref() {
        None => SqliteStore::default_path(),
        Some(spec) => match spec.strip_prefix("sqlite:") {
            Some(path) => path.into(),
            None => {
                bail!("--store must be sqlite:PATH (Redis keys expire by themselves), not `{spec}`")
            }
        },
    };
    if !path.exists() {
        bail!("no store at {}", path.display());
    }
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let before = size(&path);
    let store = SqliteStore::open_with_timeout(&path, config.store.timeout())?;
    let gone = store.expire(config.store.retention())?;
    store.compact_file()?;
    outln!(
        "{}: {gone} originals and states older than {} days deleted; {} -> {} bytes",
        path.display(),
        config.store.retention_days,
        before,
        size(&path)
    )?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The proxy's address.
    #[arg(long, default_value = "http://127.0.0.1:8787")]
    pub url: String,
    /// The environment variable holding the API key whose sessions to show (sessions are per
    /// tenant: per key).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The environment variable holding the proxy's admin token (`[proxy] admin_token`): every
    /// tenant's sessions.
    #[arg(long, value_name = "VAR")]
    pub admin_token_env: Option<String>,
}

pub fn stats(args: StatsArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let url = format!("{}/ctxgc/stats", args.url.trim_end_matches('/'));
    let body = runtime.block_on(async {
        ctxgc_summarize::install_crypto();
        let mut request = reqwest::Client::new().get(&url);
        if let Some(key) = args
            .api_key_env
            .as_deref()
            .and_then(|v| std::env::var(v).ok())
        {
            request = request.bearer_auth(key);
        }
        if let Some(token) = args
            .admin_token_env
            .as_deref()
            .and_then(|v| std::env::var(v).ok())
        {
            request = request.header("x-ctxgc-admin-token", token);
        }
        request.send().await?.error_for_status()?.text().await
    });
    let body = body.with_context(|| format!("cannot read {url}: is `ctxgc serve` running?"))?;
    let value: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("{url} did not answer JSON"))?;
    outln!("{}", serde_json::to_string_pretty(&value)?)?;
    Ok(ExitCode::SUCCESS)
}
