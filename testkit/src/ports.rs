//! Loopback ports for processes that are told their port in advance
//! (`scripts/run.sh`, a private Qdrant kept across its restarts, a Redis a
//! failover test kills while Sentinel still dials it).
//!
//! A port found by binding port 0 and closing the socket is an ephemeral one:
//! until the process it is meant for binds it, and again while that process
//! restarts, the kernel may hand it to any other socket of the suite (a
//! recording upstream, an Envoy listener, an outgoing connection). Two tests
//! then talk to each other's servers: one sees requests it never sent, the
//! other finds its listener missing. Ports below the kernel's ephemeral range
//! are taken only by an explicit bind, so [`fixed_port`] picks from there.

use std::collections::HashSet;
use std::io::{Error, ErrorKind};
use std::sync::Mutex;

/// The lowest port [`fixed_port`] hands out: above the well-known ports and
/// the ones `make run` uses by default (9901, 10000, 10001, 18080, 18081).
const LOWEST: u16 = 20_000;
/// Where the ephemeral range starts when `/proc` does not say.
const EPHEMERAL_DEFAULT: u16 = 32_768;

/// Ports this process has handed out, never handed out twice.
static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The first port of the kernel's ephemeral range (Linux's
/// `net.ipv4.ip_local_port_range`).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_DEFAULT)
}

/// A loopback TCP port below the ephemeral range that nothing listens on now
/// and that this process has not handed out before.
pub fn fixed_port() -> std::io::Result<u16> {
    let high = ephemeral_start();
    if high <= LOWEST + 100 {
        return Err(Error::other(format!(
            "the ephemeral port range starts at {high}: no room below it for fixed ports"
        )));
    }
    // Spread the start by process and time so that concurrent suites rarely
    // probe the same ports first; the bind decides.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let start = std::process::id().wrapping_mul(7919) ^ nanos;
    let mut given = GIVEN
        .lock()
        .map_err(|_| Error::other("the port registry is poisoned"))?;
    pick(LOWEST, high, start, given.get_or_insert_with(HashSet::new)).ok_or_else(|| {
        Error::new(
            ErrorKind::AddrInUse,
            format!("no free loopback port between {LOWEST} and {high}"),
        )
    })
}

/// The first port of `low..high`, walking from `start` (mod the span), that
/// is not in `given` and binds on loopback now; recorded in `given`.
fn pick(low: u16, high: u16, start: u32, given: &mut HashSet<u16>) -> Option<u16> {
    let span = u32::from(high.checked_sub(low)?);
    (0..span)
        .map(|step| low + ((start.wrapping_add(step)) % span) as u16)
        .find(|port| {
            !given.contains(port) && std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok()
        })
        .inspect(|port| {
            given.insert(*port);
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_ports_lie_below_the_ephemeral_range_and_are_never_repeated() {
        let high = ephemeral_start();
        let ports: Vec<u16> = (0..50).map(|_| fixed_port().unwrap()).collect();
        assert!(
            ports.iter().all(|&p| (LOWEST..high).contains(&p)),
            "{ports:?}"
        );
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn a_port_someone_listens_on_is_never_picked() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        assert_eq!(pick(port, port + 1, 0, &mut HashSet::new()), None);
        drop(held);
        let mut given = HashSet::new();
        assert_eq!(pick(port, port + 1, 0, &mut given), Some(port));
        assert_eq!(
            pick(port, port + 1, 0, &mut given),
            None,
            "handed out twice"
        );
    }
}
