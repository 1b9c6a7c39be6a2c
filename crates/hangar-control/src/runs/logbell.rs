//! Wake-ups for the run watchers (issue 22: idle runs cost nothing measurable): one inotify
//! instance for the whole control plane (the `inotify` crate), one watch per live run's log,
//! and a thread that turns each batch of events into a [`Notify`] of the runs whose logs
//! changed. A watcher whose log has a watch sleeps until its log changes (or its driver exits,
//! or a slow check is due) instead of looking ten times a second.
//!
//! inotify watches are plentiful (a per-user limit in the hundreds of thousands); instances are
//! few (128 per user by default), and this uses one. A log that does not exist yet cannot be
//! watched: the watcher polls until it does. Should the kernel drop events (its queue
//! overflowed), every watcher is woken to look for itself.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::Notify;

type Waiters = Arc<Mutex<HashMap<i32, Vec<Arc<Notify>>>>>;

/// The control plane's log watches (started on first use).
#[derive(Debug, Default)]
pub(crate) struct LogBells {
    inner: Mutex<Option<Inner>>,
}

#[derive(Debug, Clone)]
struct Inner {
    watches: Watches,
    waiters: Waiters,
}

/// One watcher's watch on its log; removed when dropped.
#[derive(Debug)]
pub(crate) struct Bell {
    pub(crate) notify: Arc<Notify>,
    wd: WatchDescriptor,
    inner: Inner,
}

impl LogBells {
    /// A watch on `log` (appends, a rewrite, its removal wake the returned bell); `None` when
    /// it cannot be had (no such file yet, no inotify).
    pub(crate) fn watch(&self, log: &Path) -> Option<Bell> {
        let mut inner = self.inner()?;
        let mask =
            WatchMask::MODIFY | WatchMask::CLOSE_WRITE | WatchMask::ATTRIB | WatchMask::DONT_FOLLOW;
        let wd = inner.watches.add(log, mask).ok()?;
        let notify = Arc::new(Notify::new());
        // The same file watched twice (a watcher started again before the old one ended)
        // shares one watch: each has its own waiter.
        if let Ok(mut w) = inner.waiters.lock() {
            w.entry(wd.get_watch_descriptor_id())
                .or_default()
                .push(Arc::clone(&notify));
        }
        Some(Bell { notify, wd, inner })
    }

    fn inner(&self) -> Option<Inner> {
        let mut g = self.inner.lock().ok()?;
        if let Some(i) = g.as_ref() {
            return Some(i.clone());
        }
        let inotify = match Inotify::init() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "no inotify instance for the run watchers; they poll");
                return None;
            }
        };
        let inner = Inner {
            watches: inotify.watches(),
            waiters: Waiters::default(),
        };
        let waiters = Arc::clone(&inner.waiters);
        std::thread::Builder::new()
            .name("hangar-logbell".into())
            .spawn(move || read_events(inotify, &waiters))
            .ok()?;
        *g = Some(inner.clone());
        Some(inner)
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        let Ok(mut w) = self.inner.waiters.lock() else {
            return;
        };
        let id = self.wd.get_watch_descriptor_id();
        let last = match w.get_mut(&id) {
            Some(list) => {
                list.retain(|n| !Arc::ptr_eq(n, &self.notify));
                list.is_empty()
            }
            None => false,
        };
        if last {
            w.remove(&id);
            let _ = self.inner.watches.remove(self.wd.clone());
        }
    }
}

/// The reading thread: every event wakes its watch's waiters; an overflow wakes all of them.
/// Runs as long as the control plane's process (the instance is never closed while it reads).
fn read_events(mut inotify: Inotify, waiters: &Waiters) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let events = match inotify.read_events_blocking(&mut buf) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "the run watchers' inotify failed; they poll");
                return;
            }
        };
        let Ok(waiters) = waiters.lock() else {
            return;
        };
        for ev in events {
            if ev.mask.contains(EventMask::Q_OVERFLOW) {
                waiters.values().flatten().for_each(|n| n.notify_one());
            } else if let Some(list) = waiters.get(&ev.wd.get_watch_descriptor_id()) {
                list.iter().for_each(|n| n.notify_one());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    #[tokio::test]
    async fn an_append_wakes_the_logs_watcher_and_no_other() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a.log"), d.path().join("b.log"));
        let bells = LogBells::default();
        assert!(bells.watch(&a).is_none(), "no file yet");
        std::fs::write(&a, "").unwrap();
        std::fs::write(&b, "").unwrap();
        let (wa, wb) = (bells.watch(&a).unwrap(), bells.watch(&b).unwrap());
        let mut f = std::fs::OpenOptions::new().append(true).open(&a).unwrap();
        f.write_all(b"{}\n").unwrap();
        tokio::time::timeout(Duration::from_secs(5), wa.notify.notified())
            .await
            .expect("a's watcher woke");
        let other = tokio::time::timeout(Duration::from_millis(300), wb.notify.notified()).await;
        assert!(other.is_err(), "b's watcher slept on");
        // Two watches of one file (a watcher started again): both wake; one dropped, the other
        // still does.
        let again = bells.watch(&a).unwrap();
        drop(wa);
        f.write_all(b"{}\n").unwrap();
        tokio::time::timeout(Duration::from_secs(5), again.notify.notified())
            .await
            .expect("the second watch still wakes");
    }
}
