//! The `log` facade, written to Envoy's log through the ABI directly.
//!
//! The SDK's logger (`proxy_wasm::set_log_level`) unwraps the host's status of
//! every line, so a refused write would kill the VM; here a line the host
//! refuses is dropped. A panic (a bug: the filter is written not to panic) is
//! logged at `critical` before the VM dies.

use crate::abi;
use log::{Level, LevelFilter, Log, Metadata, Record};
use proxy_wasm::types::LogLevel;

struct HostLogger;

static LOGGER: HostLogger = HostLogger;

impl Log for HostLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            Level::Error => LogLevel::Error,
            Level::Warn => LogLevel::Warn,
            Level::Info => LogLevel::Info,
            Level::Debug => LogLevel::Debug,
            Level::Trace => LogLevel::Trace,
        };
        // Nothing to do about a refused log line but to drop it.
        let _ = abi::log(level, &record.args().to_string());
    }

    fn flush(&self) {}
}

/// Installs the logger at `level` and the panic hook. Called once per VM.
pub fn init(level: LevelFilter) {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
    std::panic::set_hook(Box::new(|panic| {
        let _ = abi::log(LogLevel::Critical, &panic.to_string());
    }));
}
