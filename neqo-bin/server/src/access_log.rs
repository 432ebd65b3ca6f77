//! The access log: a line per request, written by a thread of its own so that a worker never
//! waits for it. Workers hand records over a bounded channel ([`AccessLog::log`] never
//! blocks: a record that finds it full is dropped and counted); the writer buffers lines and
//! writes them when its buffer fills, once a second, or when the log closes, so a busy server
//! makes one write for many requests. [`AccessLog::reopen`] switches it to a new output (a
//! log file opened again after logrotate moved it away) without losing a line.
//!
//! An output that fails (a full disk, a quota, an I/O error) does not stop the writer: the
//! lines of a write that failed are dropped and counted, like those of a writer behind, so
//! that every line logged is either written or counted as dropped; the writer keeps draining
//! the channel (so that the workers' records are not refused for it), holds at most one
//! buffer of lines while the output fails, and tries again after a backoff of up to
//! [`RETRY_MAX`], resuming once a write works. A write that stopped inside a line (the disk
//! took part of the buffer) leaves the rest of that line to begin the next write to that
//! output, so the line is completed rather than glued to the next one; an output given up
//! (reopened, or the log closed) with a line cut short gets that line counted as dropped, and
//! a reopened output, in case it is the same file, begins with a newline. The failure is
//! reported when it starts and when it clears, once each, through `tracing` (this crate
//! reports through `tracing`, and the embedder decides where that goes; `neqo-server` puts
//! warnings on stderr).

use std::{
    fmt::Write as _,
    io::{self, Write},
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
        mpsc::{self, SyncSender, TryRecvError},
    },
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

/// How a line reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AccessLogFormat {
    /// Like the common log format: `PEER - - [TIME] "METHOD PATH ALPN" STATUS BYTES
    /// SECONDS OUTCOME`, with `-` for what a protocol has not (hq-interop's status).
    #[default]
    Common,
    /// One JSON object per line.
    Json,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The whole response was sent and the client acknowledged it (an error status
    /// included).
    Answered,
    /// The server reset the response stream with this code (refused, malformed, a file that
    /// could not be read).
    Reset(u64),
    /// The client reset its request or asked the server to stop (STOP_SENDING), with this
    /// code.
    Cancelled(u64),
    /// The connection ended before the response did.
    ConnectionLost,
    /// The response stream was closed under it (the client stopped it).
    Closed,
    /// Past the GOAWAY (or, for protocols without one, after the shutdown began): refused
    /// unread, for the client to retry elsewhere.
    Rejected,
    /// Under way when the shutdown's drain period ended: cut (its stream reset where the
    /// protocol allows), never to be retried as unprocessed.
    Shutdown,
}

/// One request, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// When it ended.
    pub time: SystemTime,
    /// The client's address then.
    pub peer: SocketAddr,
    /// The connection's ALPN.
    pub alpn: std::borrow::Cow<'static, str>,
    /// `GET`, `HEAD`, `POST`, ...; `-` when unknown (unread, unparsable).
    pub method: String,
    /// As the client sent it (escaped when written); `-` when unknown.
    pub path: String,
    /// The HTTP status (HTTP/3 only).
    pub status: Option<u16>,
    /// Response body bytes sent.
    pub bytes: u64,
    /// From the request's stream opening to its end.
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
}

/// Records that may wait for the writer; beyond, they are dropped (and counted). With
/// [`DRAIN_EVERY`], about 330 000 requests a second before a record is dropped.
const CHANNEL: usize = 1 << 14;

/// How long the writer sleeps between drains of the channel.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// The writer's buffer: it writes when this much is waiting. While the output fails it is
/// also the bound on what waits for the next try: records beyond it are dropped.
const BUFFER: usize = 64 << 10;

/// How long a line may wait in the buffer.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The wait before the first try again after a failed write; it doubles with each failure
/// after, up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between tries while the output fails: the log resumes at most this long
/// after the output works again (given lines to write), and a failing output costs a write a
/// second at most.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// A write interrupted (`EINTR`) this many times in a row counts as failed: the loop that
/// writes a buffer ends however the output behaves.
const MAX_INTERRUPTED: u32 = 16;

/// A handle on the access log; clones share it. Records go to its writer thread until
/// [`close`](Self::close).
#[derive(Debug, Clone)]
pub struct AccessLog(Arc<Shared>);

/// What the writer is handed: a line to write, or a new place to write to.
enum Message {
    Record(Record),
    Reopen(Box<dyn Write + Send>),
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Record(r) => r.fmt(f),
            Self::Reopen(_) => f.write_str("Reopen"),
        }
    }
}

#[derive(Debug)]
struct Shared {
    tx: Mutex<Option<SyncSender<Message>>>,
    /// Records dropped before the writer had them: the channel full, or the log closed.
    behind: AtomicU64,
    /// Lines dropped because the output failed.
    failed: AtomicU64,
    written: AtomicU64,
    /// The error that began the latest run of failed writes.
    error: Mutex<Option<String>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AccessLog {
    /// Starts the writer, writing lines in `format` to `out`.
    ///
    /// # Errors
    /// The system refused the thread.
    pub fn start(out: Box<dyn Write + Send>, format: AccessLogFormat) -> io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Message>(CHANNEL);
        let shared = Arc::new(Shared {
            tx: Mutex::new(Some(tx)),
            behind: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            written: AtomicU64::new(0),
            error: Mutex::new(None),
            thread: Mutex::new(None),
        });
        let writer = Writer::new(out, format, shared.clone());
        let thread = std::thread::Builder::new()
            .name("neqo-server-access-log".into())
            .spawn(move || writer.run(&rx))?;
        *shared.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        Ok(Self(shared))
    }

    /// Hands `record` to the writer; never waits. Dropped, and counted, when the writer is
    /// behind by more than its channel holds, or the log is closed.
    pub fn log(&self, record: Record) {
        let tx = self.0.tx.lock().unwrap_or_else(PoisonError::into_inner);
        // Full (the writer behind) or closed: either way the record is not written.
        if tx
            .as_ref()
            .is_none_or(|tx| tx.try_send(Message::Record(record)).is_err())
        {
            self.0.behind.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes what is waiting to the current output, then everything after to `out`. What
    /// the current output fails to take is dropped (and counted), not carried over. Waits for
    /// room in the channel rather than drop the switch.
    ///
    /// # Errors
    /// The log is closed (or its writer panicked).
    pub fn reopen(&self, out: Box<dyn Write + Send>) -> io::Result<()> {
        // Cloned out of the lock, so that waiting for room does not block the workers' logging.
        let tx = self
            .0
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        tx.ok_or_else(|| io::Error::other("the access log is closed"))?
            .send(Message::Reopen(out))
            .map_err(|_| io::Error::other("the access log's writer is gone"))
    }

    /// Lines dropped so far, for any reason: the writer behind, the log closed, or the
    /// output failing ([`dropped_by_errors`](Self::dropped_by_errors)). Once the log is
    /// closed, `written() + dropped()` is the number of records logged.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.0.behind.load(Ordering::Relaxed) + self.dropped_by_errors()
    }

    /// Of [`dropped`](Self::dropped), the lines dropped because the output failed (a write
    /// that returned an error, and what came while it kept failing).
    #[must_use]
    pub fn dropped_by_errors(&self) -> u64 {
        self.0.failed.load(Ordering::Relaxed)
    }

    /// The error that began the latest run of failed writes, if a write ever failed.
    #[must_use]
    pub fn write_error(&self) -> Option<String> {
        self.0
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Lines written so far.
    #[must_use]
    pub fn written(&self) -> u64 {
        self.0.written.load(Ordering::Relaxed)
    }

    /// Writes what is waiting (one try: what the output refuses is dropped and counted) and
    /// stops the writer; later records are dropped. A failing output is no error here: see
    /// [`dropped_by_errors`](Self::dropped_by_errors).
    ///
    /// # Errors
    /// The writer panicked (what it held is lost, and not counted).
    pub fn close(&self) -> io::Result<()> {
        drop(
            self.0
                .tx
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let thread = self
            .0
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match thread.map(JoinHandle::join) {
            None | Some(Ok(())) => Ok(()),
            Some(Err(_)) => Err(io::Error::other("the access log's writer panicked")),
        }
    }
}

/// A run of failed writes.
#[derive(Debug)]
struct Failing {
    /// Lines dropped since it began.
    dropped: u64,
    /// When to try again.
    retry_at: Instant,
    /// The wait after the next failure.
    backoff: Duration,
}

/// The writer thread's state: lines into a buffer, written when it fills, when a line has
/// waited [`FLUSH_EVERY`], and at the end; while the output fails, when the backoff says.
struct Writer {
    out: Box<dyn Write + Send>,
    format: AccessLogFormat,
    /// Whole lines waiting.
    buf: String,
    /// How many lines `buf` holds.
    lines: u64,
    /// When the oldest line in `buf` came.
    oldest: Option<Instant>,
    /// What the output is owed before `buf`: the rest of a line a failed write cut short (its
    /// start is on the output), or a newline after a reopen that gave such a line up.
    rest: Vec<u8>,
    /// Whether writing `rest` completes a line (to be counted as written).
    rest_is_line: bool,
    failing: Option<Failing>,
    shared: Arc<Shared>,
}

impl Writer {
    fn new(out: Box<dyn Write + Send>, format: AccessLogFormat, shared: Arc<Shared>) -> Self {
        Self {
            out,
            format,
            buf: String::with_capacity(BUFFER + 1024),
            lines: 0,
            oldest: None,
            rest: Vec::new(),
            rest_is_line: false,
            failing: None,
            shared,
        }
    }

    fn run(mut self, rx: &mpsc::Receiver<Message>) {
        loop {
            // Drained without blocking: a writer waiting on the channel would make every
            // worker's send a wake-up (a futex call per request); one that sleeps between
            // drains costs the workers nothing but the channel's slot.
            loop {
                match rx.try_recv() {
                    Ok(Message::Record(record)) => self.take(&record),
                    Ok(Message::Reopen(out)) => self.reopen(out),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.finish();
                        return;
                    }
                }
            }
            let now = Instant::now();
            let due = match &self.failing {
                None => self
                    .oldest
                    .is_some_and(|t| now.saturating_duration_since(t) >= FLUSH_EVERY),
                Some(f) => now >= f.retry_at && (!self.buf.is_empty() || !self.rest.is_empty()),
            };
            if due {
                self.attempt(now);
            }
            std::thread::sleep(DRAIN_EVERY);
        }
    }

    /// Adds `record`'s line; writes when the buffer is full, unless the output is failing, in
    /// which case a full buffer drops the line.
    fn take(&mut self, record: &Record) {
        if self.failing.is_some() && self.buf.len() >= BUFFER {
            self.drop_failed(1);
            return;
        }
        line(&mut self.buf, record, self.format);
        self.lines += 1;
        self.oldest.get_or_insert_with(Instant::now);
        if self.failing.is_none() && self.buf.len() >= BUFFER {
            self.attempt(Instant::now());
        }
    }

    /// Gives what is waiting one try on the old output, then switches to `out`.
    fn reopen(&mut self, out: Box<dyn Write + Send>) {
        // What came before the switch belongs to the old output.
        if !self.buf.is_empty() || !self.rest.is_empty() {
            self.attempt(Instant::now());
        }
        self.give_up_rest();
        self.out = out;
        if let Some(f) = &mut self.failing {
            // A new output is tried at once, and is given the whole backoff again.
            f.retry_at = Instant::now();
            f.backoff = RETRY_FIRST;
        }
    }

    /// The end: one last try, then whatever is still unwritten is counted as dropped.
    fn finish(&mut self) {
        if !self.buf.is_empty() || !self.rest.is_empty() {
            self.attempt(Instant::now());
        }
        self.give_up_rest();
    }

    /// The output is given up with a line cut short: the line counts as dropped, and the
    /// next output begins with a newline (it may be the same file, which would glue the next
    /// line to the half written).
    fn give_up_rest(&mut self) {
        if self.rest.is_empty() {
            return;
        }
        if self.rest_is_line {
            self.drop_failed(1);
        }
        self.rest.clear();
        self.rest.push(b'\n');
        self.rest_is_line = false;
    }

    /// Writes what the output is owed; on failure drops (and counts) the buffer's lines and
    /// backs off, reporting when a run of failures begins and when it ends.
    fn attempt(&mut self, now: Instant) {
        self.oldest = None;
        match self.put() {
            Ok(()) => {
                if let Some(f) = self.failing.take() {
                    tracing::warn!(
                        "access log: writing again after {} lines dropped",
                        f.dropped
                    );
                }
            }
            Err(e) => {
                let f = self.failing.get_or_insert_with(|| {
                    tracing::warn!(
                        "access log: writing failed, dropping lines (and counting them) until \
                         a write works again: {e}"
                    );
                    *self
                        .shared
                        .error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                    Failing {
                        dropped: 0,
                        retry_at: now,
                        backoff: RETRY_FIRST,
                    }
                });
                f.retry_at = now + f.backoff;
                f.backoff = (f.backoff * 2).min(RETRY_MAX);
                self.buf.clear();
                let n = std::mem::take(&mut self.lines);
                self.drop_failed(n);
            }
        }
    }

    /// Writes `rest`, then `buf`, then flushes, counting the lines written. A write that stops
    /// inside a line leaves that line's rest in `rest`; the lines of `buf` not written stay
    /// counted in `lines`, for the caller to drop.
    fn put(&mut self) -> io::Result<()> {
        if !self.rest.is_empty() {
            let (n, error) = write_some(&mut *self.out, &self.rest);
            self.rest.drain(..n);
            if let Some(e) = error {
                return Err(e);
            }
            if std::mem::take(&mut self.rest_is_line) {
                self.shared.written.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !self.buf.is_empty() {
            let bytes = self.buf.as_bytes();
            let (n, error) = write_some(&mut *self.out, bytes);
            let whole = newlines(&bytes[..n]);
            self.shared.written.fetch_add(whole, Ordering::Relaxed);
            self.lines -= whole;
            if let Some(e) = error {
                if n > 0 && bytes[n - 1] != b'\n' {
                    // Cut inside a line: the rest of it comes first next time.
                    let end = bytes[n..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(bytes.len(), |i| n + i + 1);
                    self.rest = bytes[n..end].to_vec();
                    self.rest_is_line = true;
                    self.lines -= 1;
                }
                return Err(e);
            }
            self.buf.clear();
        }
        // A flush that fails loses nothing the output took (a buffered output keeps it): no
        // line is dropped for it, but it is a failing output all the same.
        self.out.flush()
    }

    /// Counts `n` lines dropped because the output failed.
    fn drop_failed(&mut self, n: u64) {
        self.shared.failed.fetch_add(n, Ordering::Relaxed);
        if let Some(f) = &mut self.failing {
            f.dropped += n;
        }
    }
}

/// Writes as much of `bytes` to `out` as it takes: how much, and the error that stopped it
/// short of all.
fn write_some(out: &mut dyn Write, bytes: &[u8]) -> (usize, Option<io::Error>) {
    let mut done = 0;
    let mut interrupted = 0;
    while done < bytes.len() {
        match out.write(&bytes[done..]) {
            Ok(0) => return (done, Some(io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                done = (done + n).min(bytes.len());
                interrupted = 0;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted && interrupted < MAX_INTERRUPTED => {
                interrupted += 1;
            }
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

/// How many lines `bytes` ends (a line is written with its newline, and has no other).
fn newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Appends `r` as one line in `format`.
fn line(buf: &mut String, r: &Record, format: AccessLogFormat) {
    let time = rfc3339(r.time);
    match format {
        AccessLogFormat::Common => {
            let status = r.status.map_or_else(|| "-".to_owned(), |s| s.to_string());
            let _ = write!(buf, "{} - - [{time}] \"", r.peer);
            escape_into(buf, &r.method);
            buf.push(' ');
            escape_into(buf, &r.path);
            let _ = writeln!(
                buf,
                " {}\" {status} {} {:.6} {}",
                r.alpn,
                r.bytes,
                r.duration.as_secs_f64(),
                outcome_text(r.outcome)
            );
        }
        AccessLogFormat::Json => {
            let (outcome, code) = match r.outcome {
                Outcome::Answered => ("answered", None),
                Outcome::Reset(c) => ("reset", Some(c)),
                Outcome::Cancelled(c) => ("cancelled", Some(c)),
                Outcome::ConnectionLost => ("connection_lost", None),
                Outcome::Closed => ("closed", None),
                Outcome::Rejected => ("rejected", None),
                Outcome::Shutdown => ("shutdown", None),
            };
            let v = serde_json::json!({
                "time": time,
                "peer": r.peer.to_string(),
                "alpn": r.alpn,
                "method": r.method,
                "path": r.path,
                "status": r.status,
                "bytes": r.bytes,
                "duration_s": r.duration.as_secs_f64(),
                "outcome": outcome,
                "code": code,
            });
            let _ = writeln!(buf, "{v}");
        }
    }
}

fn outcome_text(o: Outcome) -> String {
    match o {
        Outcome::Answered => "answered".to_owned(),
        Outcome::Reset(c) => format!("reset:{c:#x}"),
        Outcome::Cancelled(c) => format!("cancelled:{c:#x}"),
        Outcome::ConnectionLost => "connection-lost".to_owned(),
        Outcome::Closed => "closed".to_owned(),
        Outcome::Rejected => "rejected".to_owned(),
        Outcome::Shutdown => "shutdown".to_owned(),
    }
}

/// `s` with what could break a line or its fields escaped: a client's path is not to be
/// trusted (a newline would forge a line).
fn escape_into(buf: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            c if c == '"' || c == '\\' || c.is_control() || c.is_whitespace() => {
                let _ = write!(buf, "\\x{:02x}", c as u32);
            }
            c => buf.push(c),
        }
    }
}

/// `t` as RFC 3339 in UTC with milliseconds: `2026-11-27T21:10:00.123Z`.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(i64::try_from(days).unwrap_or(i64::MAX));
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).expect("1 to 31");
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).expect("1 to 12");
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &str, outcome: Outcome) -> Record {
        Record {
            time: UNIX_EPOCH + Duration::from_millis(1_795_900_200_123),
            peer: "127.0.0.1:5000".parse().unwrap(),
            alpn: "h3".into(),
            method: "GET".into(),
            path: path.into(),
            status: Some(200),
            bytes: 1234,
            duration: Duration::from_micros(4_200),
            outcome,
        }
    }

    #[test]
    fn dates_are_the_calendars() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year) and 2100-03-01 (after a century
        // that is not a leap year).
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(4_107_542_400)),
            "2100-03-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(1_795_900_200_123)),
            "2026-11-28T21:10:00.123Z"
        );
    }

    #[test]
    fn lines_in_each_format_with_hostile_paths_escaped() {
        let mut buf = String::new();
        line(
            &mut buf,
            &record("/index.html", Outcome::Answered),
            AccessLogFormat::Common,
        );
        assert_eq!(
            buf,
            "127.0.0.1:5000 - - [2026-11-28T21:10:00.123Z] \"GET /index.html h3\" 200 1234 \
             0.004200 answered\n"
        );
        buf.clear();
        let mut r = record("/a\nforged \"line\"\\\u{7f}", Outcome::Reset(0x10c));
        r.status = None;
        r.alpn = "hq-interop".into();
        line(&mut buf, &r, AccessLogFormat::Common);
        assert_eq!(
            buf,
            "127.0.0.1:5000 - - [2026-11-28T21:10:00.123Z] \"GET \
             /a\\x0aforged\\x20\\x22line\\x22\\x5c\\x7f hq-interop\" - 1234 0.004200 \
             reset:0x10c\n"
        );
        buf.clear();
        line(&mut buf, &r, AccessLogFormat::Json);
        assert_eq!(buf.matches('\n').count(), 1, "one line: {buf}");
        let v: serde_json::Value = serde_json::from_str(&buf).unwrap();
        assert_eq!(v["path"], "/a\nforged \"line\"\\\u{7f}");
        assert_eq!(v["status"], serde_json::Value::Null);
        assert_eq!(
            (v["outcome"].as_str(), v["code"].as_u64()),
            (Some("reset"), Some(0x10c))
        );
        assert_eq!(v["time"], "2026-11-28T21:10:00.123Z");
        assert_eq!(v["bytes"], 1234);
    }

    /// A writer that keeps what it is given and counts its writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut s = self.0.lock().unwrap();
            s.0.extend_from_slice(b);
            s.1 += 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Many records become few writes; close writes the rest; nothing is lost below the
    /// channel's size, and records after the close are counted as dropped.
    #[test]
    fn records_are_batched_and_all_written_by_close() {
        let sink = Sink::default();
        let log = AccessLog::start(Box::new(sink.clone()), AccessLogFormat::Common).unwrap();
        let n = 5000;
        for i in 0..n {
            log.log(record(&format!("/{i}"), Outcome::Answered));
        }
        log.close().unwrap();
        let (text, writes) = {
            let s = sink.0.lock().unwrap();
            (String::from_utf8(s.0.clone()).unwrap(), s.1)
        };
        assert_eq!(log.dropped(), 0);
        assert_eq!(log.written(), n);
        assert_eq!(text.lines().count(), n as usize);
        for (i, l) in text.lines().enumerate() {
            assert!(l.contains(&format!("\"GET /{i} h3\"")), "{l}");
        }
        assert!(writes * 100 < n as usize, "{writes} writes for {n} lines");
        log.log(record("/late", Outcome::Answered));
        assert_eq!(log.dropped(), 1);
    }

    /// Lines before a reopen go to the old output, those after to the new, none lost.
    #[test]
    fn a_reopen_switches_outputs_between_lines() {
        let (old, new) = (Sink::default(), Sink::default());
        let log = AccessLog::start(Box::new(old.clone()), AccessLogFormat::Common).unwrap();
        for i in 0..3 {
            log.log(record(&format!("/old-{i}"), Outcome::Answered));
        }
        log.reopen(Box::new(new.clone())).unwrap();
        for i in 0..2 {
            log.log(record(&format!("/new-{i}"), Outcome::Answered));
        }
        log.close().unwrap();
        let text = |s: &Sink| String::from_utf8(s.0.lock().unwrap().0.clone()).unwrap();
        let (old, new) = (text(&old), text(&new));
        assert_eq!(old.lines().count(), 3, "{old}");
        assert!(old.lines().all(|l| l.contains("/old-")), "{old}");
        assert_eq!(new.lines().count(), 2, "{new}");
        assert!(new.lines().all(|l| l.contains("/new-")), "{new}");
        assert!(log.reopen(Box::new(std::io::sink())).is_err(), "closed");
    }

    /// A writer that blocks: records beyond the channel are dropped, counted, and the
    /// caller never waits.
    #[test]
    fn a_stuck_writer_drops_records_instead_of_blocking() {
        struct Stuck(std::sync::mpsc::Receiver<()>);
        impl Write for Stuck {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let _ = self.0.recv();
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (release, stuck) = std::sync::mpsc::channel();
        let log = AccessLog::start(Box::new(Stuck(stuck)), AccessLogFormat::Common).unwrap();
        // Enough to fill the writer's buffer (so that it writes, and sticks) and the channel.
        let n = 2 * CHANNEL as u64 + 2000;
        for i in 0..n {
            log.log(record(&format!("/{i:0>100}"), Outcome::Answered));
        }
        assert!(log.dropped() > 0, "nothing dropped");
        drop(release);
        log.close().unwrap();
        assert_eq!(log.written() + log.dropped(), n);
    }

    /// A hang guard for the waits below, not a speed bound.
    const LIMIT: Duration = Duration::from_secs(60);

    /// Waits until `done` holds, polling; panics (naming `what`) once [`LIMIT`] has passed.
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + LIMIT;
        while !done() {
            assert!(
                Instant::now() < deadline,
                "not seen within {LIMIT:?}: {what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A disk: takes bytes while it has room (part of a write when it has less than all),
    /// then refuses every write with ENOSPC, as a full file system does.
    #[derive(Clone, Default)]
    struct Disk(Arc<Mutex<DiskState>>);

    #[derive(Default)]
    struct DiskState {
        data: Vec<u8>,
        /// Bytes it still takes; `None`: no end.
        room: Option<usize>,
        /// Writes it refused.
        refused: usize,
        /// The most it was asked to take at once.
        largest: usize,
    }

    impl Disk {
        fn with_room(room: usize) -> Self {
            let d = Self::default();
            d.0.lock().unwrap().room = Some(room);
            d
        }
        fn free(&self) {
            self.0.lock().unwrap().room = None;
        }
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().data.clone()).unwrap()
        }
    }

    impl Write for Disk {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut s = self.0.lock().unwrap();
            s.largest = s.largest.max(b.len());
            let n = s.room.map_or(b.len(), |r| r.min(b.len()));
            if n == 0 && !b.is_empty() {
                s.refused += 1;
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            s.data.extend_from_slice(&b[..n]);
            if let Some(r) = &mut s.room {
                *r -= n;
            }
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Records of one length, so that a line's length is known: `/{tag}{i}` padded.
    fn numbered(tag: &str, i: usize) -> Record {
        record(&format!("/{tag}{i:0>5}"), Outcome::Answered)
    }

    /// The lines `numbered(tag, i)` makes, for `is`, as written.
    fn lines_of(tag: &str, is: impl IntoIterator<Item = usize>) -> String {
        let mut buf = String::new();
        for i in is {
            line(&mut buf, &numbered(tag, i), AccessLogFormat::Common);
        }
        buf
    }

    /// Closes `log` on a thread of its own, within [`LIMIT`] (a hang guard).
    fn close_within_limit(log: &AccessLog) {
        let (done, closed) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || done.send(log2.close()));
        closed
            .recv_timeout(LIMIT)
            .expect("close returns")
            .expect("close succeeds");
    }

    /// A full disk: the lines logged while it is full are dropped and counted as dropped by
    /// errors; once it has room again, the lines logged after are written, whole.
    #[test]
    fn a_full_disk_drops_and_counts_lines_then_writing_resumes() {
        let disk = Disk::with_room(0);
        let log = AccessLog::start(Box::new(disk.clone()), AccessLogFormat::Common).unwrap();
        let n = 20;
        for i in 0..n {
            log.log(numbered("a", i));
        }
        // Each reaches the writer (the channel holds them all), and each write of them fails.
        wait_for("the lines logged on the full disk counted dropped", || {
            log.dropped_by_errors() == n as u64
        });
        assert_eq!((log.written(), log.dropped()), (0, n as u64));
        let error = log.write_error().expect("the error kept");
        assert!(error.contains("No space left"), "{error}");
        disk.free();
        for i in 0..n {
            log.log(numbered("b", i));
        }
        wait_for("the lines logged after room came back written", || {
            log.written() == n as u64
        });
        for i in n..2 * n {
            log.log(numbered("b", i));
        }
        close_within_limit(&log);
        assert_eq!(disk.text(), lines_of("b", 0..2 * n));
        assert_eq!(log.written(), 2 * n as u64);
        assert_eq!(
            (log.dropped(), log.dropped_by_errors()),
            (n as u64, n as u64)
        );
        assert!(disk.0.lock().unwrap().refused > 0);
    }

    /// A log on a disk with room for a line and a half, `n` lines logged to it: by the time
    /// it returns every line but the one cut short is accounted for (one written, the rest
    /// dropped).
    fn filled_mid_line(n: usize) -> (Disk, AccessLog) {
        let one = lines_of("a", [0]).len();
        let disk = Disk::with_room(one + one / 2);
        let log = AccessLog::start(Box::new(disk.clone()), AccessLogFormat::Common).unwrap();
        for i in 0..n {
            log.log(numbered("a", i));
        }
        wait_for("all lines but the one cut short counted", || {
            log.written() + log.dropped() == n as u64 - 1
        });
        (disk, log)
    }

    /// A disk that takes half a line and then no more: the line cut short is completed by the
    /// first write once the disk has room (not glued to the next line, not left half), the
    /// lines that did not fit are counted as dropped, and the log goes on.
    #[test]
    fn a_line_cut_short_is_completed_when_room_comes_back() {
        let (one, n) = (lines_of("a", [0]).len(), 10);
        let (disk, log) = filled_mid_line(n);
        assert_eq!(log.written(), 1);
        assert_eq!(log.dropped_by_errors(), n as u64 - 2);
        let half = disk.text();
        assert_eq!(half.len(), one + one / 2);
        assert!(lines_of("a", 0..2).starts_with(&half), "{half}");
        disk.free();
        for i in 0..5 {
            log.log(numbered("b", i));
        }
        wait_for("the cut line and the later ones written", || {
            log.written() == 2 + 5
        });
        close_within_limit(&log);
        assert_eq!(disk.text(), lines_of("a", 0..2) + &lines_of("b", 0..5));
        assert_eq!(log.written() + log.dropped(), n as u64 + 5);
        assert_eq!(log.dropped(), log.dropped_by_errors());
    }

    /// A disk that stays full, from the start or after half a line: every line is counted
    /// by the end (the line cut short as dropped), what is logged while it fails is held a
    /// buffer at most (no write tries more), and close returns (one last try, no backoff to
    /// sit out).
    #[test]
    fn a_disk_that_stays_full_has_every_line_counted_at_close() {
        let one = lines_of("a", [0]).len();
        // Several buffers' worth, well within the channel.
        let n = 5000;
        assert!(n * one > 4 * BUFFER && n < CHANNEL);
        for (room, written) in [(0, 0), (one + one / 2, 1)] {
            let disk = Disk::with_room(room);
            let log = AccessLog::start(Box::new(disk.clone()), AccessLogFormat::Common).unwrap();
            for i in 0..n {
                log.log(numbered("a", i));
            }
            close_within_limit(&log);
            assert_eq!(log.written(), written, "room {room}");
            assert_eq!(log.dropped(), n as u64 - written, "room {room}");
            assert_eq!(log.dropped_by_errors(), n as u64 - written, "room {room}");
            assert_eq!(disk.text().len(), room);
            let largest = disk.0.lock().unwrap().largest;
            assert!(
                largest <= BUFFER + one,
                "room {room}: a write of {largest} B"
            );
            // After the close: dropped, but not by an error.
            log.log(numbered("late", 0));
            assert_eq!(log.dropped(), n as u64 - written + 1);
            assert_eq!(log.dropped_by_errors(), n as u64 - written);
        }
    }

    /// The writer outlives a failing output: a reopen switches to a working one, which
    /// begins with a newline (it may be the same file as the one left with a line cut short)
    /// and gets every line logged after.
    #[test]
    fn a_reopen_after_a_failure_writes_to_the_new_output() {
        let (one, n) = (lines_of("a", [0]).len(), 10);
        let (disk, log) = filled_mid_line(n);
        let new = Disk::default();
        log.reopen(Box::new(new.clone())).unwrap();
        for i in 0..5 {
            log.log(numbered("b", i));
        }
        close_within_limit(&log);
        assert_eq!(new.text(), "\n".to_owned() + &lines_of("b", 0..5));
        assert_eq!(disk.text().len(), one + one / 2);
        assert_eq!(log.written(), 1 + 5);
        assert_eq!(log.dropped(), n as u64 - 1);
        assert_eq!(log.dropped_by_errors(), n as u64 - 1);
    }

    /// Short writes and interrupted ones are carried on: every line written whole, none
    /// counted as dropped.
    #[test]
    fn short_and_interrupted_writes_are_carried_on() {
        #[derive(Clone, Default)]
        struct Stingy(Arc<Mutex<(Vec<u8>, bool)>>);
        impl Write for Stingy {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let mut s = self.0.lock().unwrap();
                s.1 = !s.1;
                if s.1 {
                    return Err(std::io::ErrorKind::Interrupted.into());
                }
                let n = b.len().min(7);
                s.0.extend_from_slice(&b[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = Stingy::default();
        let log = AccessLog::start(Box::new(out.clone()), AccessLogFormat::Common).unwrap();
        for i in 0..50 {
            log.log(numbered("a", i));
        }
        close_within_limit(&log);
        let text = String::from_utf8(out.0.lock().unwrap().0.clone()).unwrap();
        assert_eq!(text, lines_of("a", 0..50));
        assert_eq!((log.written(), log.dropped()), (50, 0));
    }
}
