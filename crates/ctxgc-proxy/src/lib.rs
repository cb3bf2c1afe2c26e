//! ctxgc-proxy: `ctxgc serve`, a drop-in proxy for the OpenAI and Anthropic APIs.
//!
//! Agents change their base URL to the proxy. Requests to `/v1/chat/completions`,
//! `/v1/responses`, `/v1/messages` and `/v1/messages/count_tokens` are rewritten (insertion-time
//! trimming of tool results, originals stored first, cache keys and breakpoints); everything else
//! is forwarded untouched. Responses are never rewritten: they stream back byte for byte as they
//! arrive, except that the proxy's own agent tools (`--inject-tools`) are run here and hidden
//! from the client. With `--compact`, the engine's events run across requests. Any internal
//! failure forwards the original request unchanged (fail open) and is logged and counted.
//! Headers are forwarded and never logged or stored.
//!
//! A request flows one way, and so do the imports: `server` (routes) hands it to `route`, which
//! reads as its stages in order: admitted (`admission`), parsed and identified (`intake`),
//! rewritten (`route::prepare` over `rewrite` and `lifetime`) or forwarded unchanged, the work
//! beside it noted, sent (`upstream`) and its answer relayed, through the agent tools' rounds
//! (`agent`) when they were injected. The state the requests share is `state`'s [`AppState`],
//! made of the parts in the folders below it; `observe` counts and shows, `wire` reads and
//! splices bytes. `docs/architecture.md` draws the route.

#![deny(missing_docs)]

mod admission;
pub mod agent;
mod error;
pub mod intake;
mod lifetime;
mod observe;
mod reply;
pub mod rewrite;
mod route;
mod server;
mod settings;
mod state;
pub mod upstream;
pub mod wire;

pub use error::ProxyError;
pub use lifetime::keepalive::KeepAliveSettings;
pub use observe::queue::ObserveTotals;
pub use observe::sessions::SessionUsage;
pub use observe::stats::Stats;
pub use rewrite::request::RewriteSettings;
pub use server::{router, serve, serve_on, serve_until};
pub use settings::{GEMINI_UPSTREAM, Limits, ProxySettings, Timeouts};
pub use state::{AppState, existing_tenant_secret};
pub use upstream::client::redact_url;
