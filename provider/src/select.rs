//! Run-time choice of backend: `SOFTVERBS_PROVIDER=emu|hw|auto`, or the API.

use softverbs_api::{VerbsError, VerbsResult};

/// The environment variable choosing the backend.
pub const PROVIDER_ENV: &str = "SOFTVERBS_PROVIDER";

/// Which backend serves verbs calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// The soft-RoCE emulator.
    Emu,
    /// Real RDMA devices through rdma-core (cargo feature `hw`).
    Hw,
    /// Real devices if any exist, else the emulator.
    Auto,
}

impl Provider {
    /// The provider named by `SOFTVERBS_PROVIDER` (default `auto`).
    pub fn from_env() -> VerbsResult<Provider> {
        match std::env::var(PROVIDER_ENV) {
            Ok(v) => Provider::parse(&v),
            Err(_) => Ok(Provider::Auto),
        }
    }

    /// Parses `emu`, `hw` or `auto`.
    pub fn parse(s: &str) -> VerbsResult<Provider> {
        match s.trim() {
            "emu" => Ok(Provider::Emu),
            "hw" => Ok(Provider::Hw),
            "auto" | "" => Ok(Provider::Auto),
            other => Err(VerbsError::inval(format!(
                "{PROVIDER_ENV}={other:?}: expected emu, hw or auto"
            ))),
        }
    }

    /// The backend that will really serve calls: `hw` needs the `hw` feature; `auto` is
    /// `hw` when the feature is built in and rdma-core lists at least one device, else the
    /// emulator (saying so once through `tracing` when the feature is built in, so that a
    /// silent fallback on a machine expected to have a NIC can be noticed).
    pub fn resolve(self) -> VerbsResult<Provider> {
        match self {
            Provider::Emu => Ok(Provider::Emu),
            Provider::Hw if cfg!(feature = "hw") => Ok(Provider::Hw),
            Provider::Hw => Err(VerbsError::NotSupported(
                "the hardware passthrough is not built in (cargo feature `hw`)".into(),
            )),
            Provider::Auto => Ok(resolve_auto()),
        }
    }

    /// The backend's name as [`softverbs_api::DeviceInfo::backend`] gives it.
    pub fn backend_name(self) -> &'static str {
        match self {
            Provider::Emu => "emu",
            Provider::Hw => "hw",
            Provider::Auto => "auto",
        }
    }
}

#[cfg(feature = "hw")]
fn resolve_auto() -> Provider {
    static FALLBACK_SAID: std::sync::Once = std::sync::Once::new();
    let why = match crate::hw::devices() {
        Ok(list) if !list.is_empty() => return Provider::Hw,
        Ok(_) => "no rdma-core device".to_string(),
        Err(e) => format!("listing rdma-core devices failed: {e}"),
    };
    FALLBACK_SAID.call_once(|| {
        tracing::info!("{PROVIDER_ENV}=auto: {why}; using the emulator");
    });
    Provider::Emu
}

#[cfg(not(feature = "hw"))]
fn resolve_auto() -> Provider {
    Provider::Emu
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_resolve() {
        assert_eq!(Provider::parse("emu").unwrap(), Provider::Emu);
        if !cfg!(feature = "hw") {
            assert_eq!(
                Provider::parse("auto").unwrap().resolve().unwrap(),
                Provider::Emu
            );
        }
        assert_eq!(Provider::parse("bogus").unwrap_err().errno(), 22);
        if !cfg!(feature = "hw") {
            assert_eq!(Provider::Hw.resolve().unwrap_err().errno(), 95);
        }
    }
}

/// With the hardware backend built in but no rdma-core device, `auto` falls back to the
/// emulator and says so through `tracing` exactly once per process.
#[cfg(all(test, feature = "hw"))]
mod fallback_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::Provider;

    /// A subscriber that counts the events whose message says the emulator was chosen.
    struct Counter(Arc<AtomicUsize>);

    struct Message(String);

    impl tracing::field::Visit for Message {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{value:?}");
            }
        }
    }

    impl tracing::Subscriber for Counter {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut m = Message(String::new());
            event.record(&mut m);
            if m.0.contains("using the emulator") {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn auto_without_devices_falls_back_and_says_so_once() {
        if !crate::hw::devices().unwrap_or_default().is_empty() {
            // With a device, auto selects it; nothing to fall back from.
            assert_eq!(Provider::Auto.resolve().unwrap(), Provider::Hw);
            return;
        }
        let said = Arc::new(AtomicUsize::new(0));
        tracing::subscriber::with_default(Counter(said.clone()), || {
            for _ in 0..3 {
                assert_eq!(Provider::Auto.resolve().unwrap(), Provider::Emu);
            }
        });
        assert_eq!(said.load(Ordering::SeqCst), 1, "the fallback is said once");
    }
}
