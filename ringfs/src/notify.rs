//! systemd's readiness protocol (sd_notify(3)) for `Type=notify` units such
//! as `ringfs@.service`: one datagram to `$NOTIFY_SOCKET` when the mount is
//! ready (`READY=1`) and when a clean stop begins (`STOPPING=1`). Without
//! `$NOTIFY_SOCKET` (not started by systemd) nothing is sent.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `"READY=1"`) to systemd; errors are logged, not fatal.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let addr = match bytes.strip_prefix(b"@") {
        // An abstract socket: '@' stands for the leading NUL.
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(&path),
    };
    let sent = addr.and_then(|addr| {
        let sock = UnixDatagram::unbound()?;
        sock.send_to_addr(state.as_bytes(), &addr)
    });
    if let Err(e) = sent {
        tracing::warn!("telling systemd {state} through NOTIFY_SOCKET {}: {e}", path.to_string_lossy());
    }
}
