//! The access log: a line per request, written by a thread of its own so that a worker never
//! waits for it. Workers hand records over a bounded channel ([`AccessLog::log`] never
//! blocks: a record that finds it full is dropped and counted); the writer buffers lines and
//! writes them when its buffer fills, once a second, or when the log closes, so a busy server
//! makes one write for many requests. [`AccessLog::reopen`] switches it to a new output (a
//! log file opened again after logrotate moved it away) without losing a line.

use std::{
    fmt::Write as _,
    io::Write,
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

/// The writer's buffer: it writes when this much is waiting.
const BUFFER: usize = 64 << 10;

/// How long a line may wait in the buffer.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

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
    dropped: AtomicU64,
    written: AtomicU64,
    thread: Mutex<Option<JoinHandle<std::io::Result<()>>>>,
}

impl AccessLog {
    /// Starts the writer, writing lines in `format` to `out`.
    ///
    /// # Errors
    /// The system refused the thread.
    pub fn start(out: Box<dyn Write + Send>, format: AccessLogFormat) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Message>(CHANNEL);
        let shared = Arc::new(Shared {
            tx: Mutex::new(Some(tx)),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            thread: Mutex::new(None),
        });
        let counts = shared.clone();
        let thread = std::thread::Builder::new()
            .name("neqo-server-access-log".into())
            .spawn(move || write_lines(&rx, out, format, &counts.written))?;
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
            self.0.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Writes what is waiting to the current output, then everything after to `out`.
    /// Waits for room in the channel rather than drop the switch.
    ///
    /// # Errors
    /// The log is closed.
    pub fn reopen(&self, out: Box<dyn Write + Send>) -> std::io::Result<()> {
        // Cloned out of the lock, so that waiting for room does not block the workers' logging.
        let tx = self
            .0
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        tx.ok_or_else(|| std::io::Error::other("the access log is closed"))?
            .send(Message::Reopen(out))
            .map_err(|_| std::io::Error::other("the access log's writer is gone"))
    }

    /// Records dropped so far (the writer behind, or closed).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }

    /// Lines written so far.
    #[must_use]
    pub fn written(&self) -> u64 {
        self.0.written.load(Ordering::Relaxed)
    }

    /// Writes what is waiting and stops the writer; later records are dropped.
    ///
    /// # Errors
    /// A write that failed (the log stopped at it), or a writer that panicked.
    pub fn close(&self) -> std::io::Result<()> {
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
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the access log's writer panicked")),
        }
    }
}

/// The writer: lines into a buffer, written when it fills, when a line has waited
/// [`FLUSH_EVERY`], and at the end.
fn write_lines(
    rx: &mpsc::Receiver<Message>,
    mut out: Box<dyn Write + Send>,
    format: AccessLogFormat,
    written: &AtomicU64,
) -> std::io::Result<()> {
    let mut buf = String::with_capacity(BUFFER + 1024);
    let mut oldest: Option<Instant> = None;
    let mut lines = 0u64;
    let write = |out: &mut Box<dyn Write + Send>,
                 buf: &mut String,
                 lines: &mut u64|
     -> std::io::Result<()> {
        out.write_all(buf.as_bytes())?;
        out.flush()?;
        buf.clear();
        written.fetch_add(std::mem::take(lines), Ordering::Relaxed);
        Ok(())
    };
    loop {
        // Drained without blocking: a writer waiting on the channel would make every
        // worker's send a wake-up (a futex call per request); one that sleeps between
        // drains costs the workers nothing but the channel's slot.
        let mut ended = false;
        loop {
            match rx.try_recv() {
                Ok(Message::Record(record)) => {
                    line(&mut buf, &record, format);
                    lines += 1;
                    oldest.get_or_insert_with(Instant::now);
                    if buf.len() >= BUFFER {
                        write(&mut out, &mut buf, &mut lines)?;
                        oldest = None;
                    }
                }
                Ok(Message::Reopen(new)) => {
                    // What came before the switch belongs to the old output.
                    if !buf.is_empty() {
                        write(&mut out, &mut buf, &mut lines)?;
                    }
                    oldest = None;
                    out = new;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    ended = true;
                    break;
                }
            }
        }
        if !buf.is_empty() && (ended || oldest.is_some_and(|t| t.elapsed() >= FLUSH_EVERY)) {
            write(&mut out, &mut buf, &mut lines)?;
            oldest = None;
        }
        if ended {
            return Ok(());
        }
        std::thread::sleep(DRAIN_EVERY);
    }
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
}
