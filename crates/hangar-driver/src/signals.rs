//! The driver's own signals: Ctrl-C in the turn's terminal interrupts the turn; SIGTERM and
//! SIGHUP stop it. The handlers only count, in atomics; the main loop looks at the counts a few
//! times a second.

use std::sync::atomic::{AtomicU32, Ordering};

static INTERRUPTS: AtomicU32 = AtomicU32::new(0);
static STOPS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTS.fetch_add(1, Ordering::Relaxed);
}

extern "C" fn on_stop(_: libc::c_int) {
    STOPS.fetch_add(1, Ordering::Relaxed);
}

/// Installs the handlers. The harness runs in a process group of its own, so a terminal's
/// Ctrl-C reaches only the driver.
pub fn install() {
    // SAFETY: the handlers only touch atomics, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_stop as *const () as libc::sighandler_t);
    }
}

/// Ctrl-C presses since the last call.
pub fn take_interrupts() -> u32 {
    INTERRUPTS.swap(0, Ordering::Relaxed)
}

/// Whether SIGTERM or SIGHUP has arrived.
pub fn stop_requested() -> bool {
    STOPS.load(Ordering::Relaxed) > 0
}
