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

    /// The backend that will really serve calls: `hw` needs the `hw` feature; `auto` falls
    /// back to the emulator when no hardware backend is built in.
    pub fn resolve(self) -> VerbsResult<Provider> {
        match self {
            Provider::Emu => Ok(Provider::Emu),
            Provider::Hw if cfg!(feature = "hw") => Ok(Provider::Hw),
            Provider::Hw => Err(VerbsError::NotSupported(
                "the hardware passthrough is not built in (cargo feature `hw`)".into(),
            )),
            Provider::Auto => Ok(Provider::Emu),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_resolve() {
        assert_eq!(Provider::parse("emu").unwrap(), Provider::Emu);
        assert_eq!(
            Provider::parse("auto").unwrap().resolve().unwrap(),
            Provider::Emu
        );
        assert_eq!(Provider::parse("bogus").unwrap_err().errno(), 22);
        if !cfg!(feature = "hw") {
            assert_eq!(Provider::Hw.resolve().unwrap_err().errno(), 95);
        }
    }
}
