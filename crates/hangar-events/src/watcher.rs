//! Reading a growing run log from a saved cursor.
//!
//! The driver appends whole JSON lines to `run.log` while the control plane reads it. A reader
//! keeps a **cursor**: the byte offset just past the last line it has taken. [`LogReader`] reads
//! from a cursor and returns only complete lines (a last line without its newline yet is left
//! for next time) and the new cursor; called again with that cursor it never returns a line
//! twice and never skips one. [`ingest`] reads and parses ([`crate::events::parse_line`]) in one
//! step; [`rebuild`] gives all events of a whole log from offset 0, which is what incremental
//! ingestion must add up to.
//!
//! Lines are bytes up to `\n`; invalid UTF-8 is replaced (U+FFFD) before parsing. A line longer
//! than the reader's line limit (64 MiB by default) is read through to its newline without
//! keeping it, and a `hangar.warning` line written by the reader (at the skipped line's offset)
//! stands in for it, so it becomes a `warning` event.
//!
//! # Sealed logs
//!
//! A log the driver wrote seals every write (`hangar_protocol::logseal`). A context whose
//! [`LogMode`] says `sealed` is read with the run's seal key ([`LogReader::sealed`]): only bytes
//! a valid seal covers become lines, taken in the seals' order; a stretch no seal covers (an
//! agent of the driver's own uid appended it, or changed bytes) becomes one `hangar.warning`
//! line at its offset saying so, and bytes after the last seal wait for the next one (as a
//! partial line waits for its newline). The seal lines themselves make no lines.
//!
//! Non-goals: persistence (the store commits a [`Batch`]'s events, its cursor and the
//! [`ParseContext`] in one transaction), waiting for the file to grow (inotify or polling is
//! the caller's), log rotation (a log shorter than its cursor is an error, not a new log).

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Seek, SeekFrom};
use std::path::Path;

use std::sync::Arc;

use hangar_protocol::logseal::{self, Piece};
pub use hangar_protocol::logseal::{Order, SealKey};
use hangar_protocol::runlog::HangarLine;

use crate::error::CoreError;
use crate::events::{EventKind, LogMode, ParseContext, ProgressEvent, parse_line};

/// How many bytes of lines [`ingest`] takes per call (more when one line is longer).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 20;

/// The longest line a [`LogReader`] returns by default; longer ones are skipped with a warning.
pub const DEFAULT_MAX_LINE_BYTES: u64 = 64 << 20;

/// Size of the read buffer.
const BUF_BYTES: usize = 64 << 10;

/// Reads complete lines of a run log from a cursor. See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogReader {
    max_line_bytes: u64,
    /// The run's seal key and id, to read a sealed log.
    seals: Option<Arc<(SealKey, String)>>,
}

impl Default for LogReader {
    fn default() -> LogReader {
        LogReader {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            seals: None,
        }
    }
}

/// What a sealed read gave: the lines (hangar's, and a warning for each stretch it did not
/// write), the cursor after them, and the number of the last seal taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedRead {
    /// Each line with its byte offset.
    pub lines: Vec<(u64, String)>,
    /// Just past the last seal taken.
    pub new_cursor: u64,
    /// The last seal's number (`None` when none was taken).
    pub last_seal: Option<u64>,
    /// The read went to the end of the log: nothing after `new_cursor` can be decided yet.
    pub at_end: bool,
}

/// The warning that stands for `len` bytes at `at` that no seal of hangar's covers.
pub fn unsealed_warning(at: u64, len: u64) -> String {
    HangarLine::Warning {
        message: format!(
            "{len} bytes at byte {at} of the run log carry no valid seal: hangar's driver did not write them (the agent, running as the driver's own user, can append to the log), so they are neither shown nor acted on"
        ),
    }
    .to_json()
}

/// Events read from a run log and the cursor after them.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// The events of the lines read, in log order.
    pub events: Vec<ProgressEvent>,
    /// Where the next read starts: just past the last line taken.
    pub new_cursor: u64,
}

/// One line read from the buffer.
enum Read {
    /// A complete line, without its newline.
    Line(Vec<u8>),
    /// A complete line longer than the limit (its length without the newline), not kept.
    TooLong(u64),
    /// The end of the file came before a newline.
    Partial,
}

impl LogReader {
    /// A reader with the default line limit (64 MiB).
    pub fn new() -> LogReader {
        LogReader::default()
    }

    /// A reader that skips lines longer than `max_line_bytes`.
    pub fn with_max_line_bytes(max_line_bytes: u64) -> LogReader {
        LogReader {
            max_line_bytes,
            seals: None,
        }
    }

    /// This reader with the seal key of run `run`, for logs read as sealed.
    pub fn sealed(mut self, key: SealKey, run: &str) -> LogReader {
        self.seals = Some(Arc::new((key, run.to_owned())));
        self
    }

    /// Whether this reader has a seal key.
    pub fn has_seal_key(&self) -> bool {
        self.seals.is_some()
    }

    /// Reads a sealed log from `cursor` (0, or where a previous sealed read stopped) until at
    /// least `max_bytes` are decided or no seal is left: the lines of every sealed write, a
    /// warning line for each stretch no seal covers, seals taken in `order`. Without a seal key
    /// this is [`CoreError::NoSealKey`].
    pub fn read_sealed(
        &self,
        path: &Path,
        cursor: u64,
        max_bytes: u64,
        order: Order,
    ) -> Result<SealedRead, CoreError> {
        let Some(seals) = &self.seals else {
            return Err(CoreError::NoSealKey {
                path: path.to_owned(),
            });
        };
        let (key, run) = (&seals.0, seals.1.as_str());
        let Some(file) = open_at(path, cursor)? else {
            return Ok(SealedRead {
                lines: Vec::new(),
                new_cursor: cursor,
                last_seal: None,
                at_end: true,
            });
        };
        let scan = logseal::scan(
            &file,
            cursor,
            max_bytes,
            self.max_line_bytes,
            key,
            run,
            order,
        )
        .map_err(|e| CoreError::io(path, e))?;
        let mut lines = Vec::new();
        for piece in scan.pieces {
            match piece {
                Piece::Unsealed { at, len } => lines.push((at, unsealed_warning(at, len))),
                Piece::Sealed {
                    at,
                    bytes: Some(bytes),
                    ..
                } => {
                    let mut off = at;
                    for l in bytes.split_inclusive(|&b| b == b'\n') {
                        let text = l.strip_suffix(b"\n").unwrap_or(l);
                        lines.push((off, String::from_utf8_lossy(text).into_owned()));
                        off += l.len() as u64;
                    }
                }
                Piece::Sealed {
                    at,
                    len,
                    bytes: None,
                    ..
                } => {
                    let message = format!(
                        "run-log write at byte {at} is {len} bytes, over the reader's limit of {} bytes; skipped",
                        self.max_line_bytes
                    );
                    lines.push((at, HangarLine::Warning { message }.to_json()));
                }
            }
        }
        Ok(SealedRead {
            lines,
            new_cursor: scan.resolved,
            last_seal: scan.last,
            at_end: scan.at_end,
        })
    }

    /// Reads complete lines starting at `cursor` (a line start: 0 or a cursor this returned)
    /// until at least `max_bytes` were taken or no complete line is left; one line is taken
    /// however long it is (up to the line limit). Returns each line with its byte offset, and
    /// the new cursor. A file that does not exist yet has no lines (the cursor stays). A cursor
    /// past the end of the file is [`CoreError::CursorPastEnd`].
    pub fn read_from(
        &self,
        path: &Path,
        cursor: u64,
        max_bytes: u64,
    ) -> Result<(Vec<(u64, String)>, u64), CoreError> {
        let Some(mut file) = open_at(path, cursor)? else {
            return Ok((Vec::new(), cursor));
        };
        file.seek(SeekFrom::Start(cursor))
            .map_err(|e| CoreError::io(path, e))?;
        let mut reader = BufReader::with_capacity(BUF_BYTES, file);
        let mut lines = Vec::new();
        let mut pos = cursor;
        while pos - cursor < max_bytes.max(1) {
            let read =
                next_line(&mut reader, self.max_line_bytes).map_err(|e| CoreError::io(path, e))?;
            match read {
                Read::Line(bytes) => {
                    let n = bytes.len() as u64;
                    let text = match String::from_utf8(bytes) {
                        Ok(s) => s,
                        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                    };
                    lines.push((pos, text));
                    pos += n + 1;
                }
                Read::TooLong(n) => {
                    let message = format!(
                        "run-log line at byte {pos} is {n} bytes, over the reader's limit of {} \
                         bytes; skipped",
                        self.max_line_bytes
                    );
                    lines.push((pos, HangarLine::Warning { message }.to_json()));
                    pos += n + 1;
                }
                Read::Partial => break,
            }
        }
        Ok((lines, pos))
    }

    /// [`LogReader::read_from`], each line parsed with `ctx` (its `offset` set to the line's).
    /// On success `ctx` has advanced with the lines; a caller that then fails to commit the
    /// batch should go on with a copy of the context it had before.
    pub fn ingest(
        &self,
        path: &Path,
        cursor: u64,
        max_bytes: u64,
        ctx: &mut ParseContext,
    ) -> Result<Batch, CoreError> {
        let (lines, new_cursor) = if ctx.log.as_ref().is_some_and(|m| m.sealed) {
            let read = self.read_sealed(path, cursor, max_bytes, Order::After(ctx.seal_n))?;
            if let Some(n) = read.last_seal {
                ctx.seal_n = n;
            }
            (read.lines, read.new_cursor)
        } else {
            self.read_from(path, cursor, max_bytes)?
        };
        let mut events = Vec::new();
        for (offset, line) in lines {
            ctx.offset = offset;
            events.extend(parse_line(&line, ctx));
        }
        ctx.offset = new_cursor;
        Ok(Batch { events, new_cursor })
    }
}

/// Reads one line, keeping at most `max_line` bytes of it.
fn next_line(r: &mut BufReader<File>, max_line: u64) -> std::io::Result<Read> {
    let mut buf = Vec::new();
    let mut len: u64 = 0;
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(Read::Partial);
        }
        // memchr: a byte-by-byte search for the newline was a seventh of a slice's parse.
        let (take, newline) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if len + take as u64 > max_line {
                too_long = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        len += take as u64;
        r.consume(take + usize::from(newline));
        if newline {
            return Ok(if too_long {
                Read::TooLong(len)
            } else {
                Read::Line(buf)
            });
        }
    }
}

/// Reads and parses the lines after `cursor` (at most about [`DEFAULT_MAX_BYTES`] of them;
/// call again with the new cursor until it stops moving). See [`LogReader::ingest`].
pub fn ingest(path: &Path, cursor: u64, ctx: &mut ParseContext) -> Result<Batch, CoreError> {
    LogReader::default().ingest(path, cursor, DEFAULT_MAX_BYTES, ctx)
}

/// All events of the log at `path` from offset 0, with a fresh context: what the watcher's
/// batches must add up to. A last line without its newline is not included (as the watcher
/// would not take it yet); a read error ends the list with a `warning` event.
pub fn rebuild(path: &Path) -> Vec<ProgressEvent> {
    rebuild_with(path, &LogReader::default(), None)
}

/// [`rebuild`] of a log read as `mode` says (the mode the control plane's watcher started
/// with), with `reader` (which holds the seal key of a sealed log).
pub fn rebuild_with(path: &Path, reader: &LogReader, mode: Option<LogMode>) -> Vec<ProgressEvent> {
    let mut ctx = ParseContext::with_log(mode);
    let mut cursor = 0;
    let mut events = Vec::new();
    loop {
        match reader.ingest(path, cursor, DEFAULT_MAX_BYTES, &mut ctx) {
            Ok(batch) => {
                events.extend(batch.events);
                if batch.new_cursor == cursor {
                    return events;
                }
                cursor = batch.new_cursor;
            }
            Err(e) => {
                events.push(ProgressEvent {
                    offset: cursor,
                    kind: EventKind::Warning {
                        message: format!("rebuild stopped: {e}"),
                    },
                });
                return events;
            }
        }
    }
}

/// The log opened for reading from `cursor`; `None` while it does not exist. A cursor past its
/// end is [`CoreError::CursorPastEnd`].
fn open_at(path: &Path, cursor: u64) -> Result<Option<File>, CoreError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CoreError::io(path, e)),
    };
    let len = file.metadata().map_err(|e| CoreError::io(path, e))?.len();
    if cursor > len {
        return Err(CoreError::CursorPastEnd {
            path: path.to_owned(),
            cursor,
            len,
        });
    }
    Ok(Some(file))
}
#[cfg(test)]
#[path = "watcher_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "watcher_sealed_tests.rs"]
mod sealed_tests;
