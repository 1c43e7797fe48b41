//! A per-layer filter that a callsite may not cache as "always".
//!
//! Per-layer filters hand their decision from `enabled` to `on_new_span`/`on_event` through a
//! thread-local. A callsite whose interest is cached as `always` skips `enabled`, so its span
//! reads whatever the last `enabled` call on the thread left there: after a `log_enabled!`
//! check that one layer refused (sqlx asks after every query), the next such span is dropped
//! from that layer. With traces exported and `RUST_LOG=debug,sqlx=info` (how `make test` keeps
//! logs), the traces lost their `delivery` span and the logs their `request` span
//! (tokio-rs/tracing#2519). Asked each time (`sometimes`), the filters set the thread-local
//! for the span they are asked about.

use tracing::{Metadata, subscriber::Interest};
use tracing_subscriber::{
    filter::LevelFilter,
    layer::{Context, Filter},
};

/// `F`, with an interest of `always` turned into `sometimes`; everything else as `F` says.
pub struct Uncached<F>(pub F);

impl<S, F: Filter<S>> Filter<S> for Uncached<F> {
    fn enabled(&self, metadata: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        self.0.enabled(metadata, cx)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        let interest = self.0.callsite_enabled(metadata);
        if interest.is_always() {
            Interest::sometimes()
        } else {
            interest
        }
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, cx: &Context<'_, S>) -> bool {
        self.0.event_enabled(event, cx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        cx: Context<'_, S>,
    ) {
        self.0.on_new_span(attrs, id, cx)
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        cx: Context<'_, S>,
    ) {
        self.0.on_record(id, values, cx)
    }

    fn on_enter(&self, id: &tracing::span::Id, cx: Context<'_, S>) {
        self.0.on_enter(id, cx)
    }

    fn on_exit(&self, id: &tracing::span::Id, cx: Context<'_, S>) {
        self.0.on_exit(id, cx)
    }

    fn on_close(&self, id: tracing::span::Id, cx: Context<'_, S>) {
        self.0.on_close(id, cx)
    }
}
