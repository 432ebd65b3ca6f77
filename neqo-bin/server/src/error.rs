//! Why a server did not start, or stopped: [`ServerError`]. Each refusal of a setting is a
//! variant of its own, so that a front end (neqo-server's CLI, a config file) can name the
//! setting as its user wrote it; the messages here name the setting in words. As is usual,
//! a message leaves its [`source`](std::error::Error::source) out: print the chain (anyhow's
//! `{:#}`) to see it.

use std::{io, net::SocketAddr, path::PathBuf};

/// Why [`Server::bind`](crate::Server::bind) refused to start, or
/// [`Server::run`](crate::Server::run) ended in failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// [`ServerConfig::root`](crate::ServerConfig::root) is not a directory files can be
    /// served from.
    #[error("the root {}: cannot serve from it", path.display())]
    Root {
        /// As given.
        path: PathBuf,
        /// Why it cannot be opened as a directory.
        source: io::Error,
    },
    /// [`ServerConfig::alpns`](crate::ServerConfig::alpns) is empty.
    #[error("no ALPN to offer")]
    NoAlpn,
    /// An ALPN among [`ServerConfig::alpns`](crate::ServerConfig::alpns) the server has no
    /// application for.
    #[error("no application for ALPN {0:?} (hq-interop, perf and h3 are served)")]
    UnknownAlpn(String),
    /// The TLS identity or the transport settings were refused.
    #[error(transparent)]
    Config(#[from] neqo_driver::ConfigError),
    /// The worker count or the server ID cannot make connection IDs.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// [`Secrets::Logged`](neqo_driver::tls::Secrets::Logged) without `SSLKEYLOGFILE`, which
    /// names the file the secrets go to.
    #[error("TLS secrets are to be logged, but SSLKEYLOGFILE is not set (it names the file)")]
    KeylogUnset,
    /// The metrics endpoint cannot listen at
    /// [`ServerConfig::metrics`](crate::ServerConfig::metrics).
    #[error("the metrics endpoint {addr}: cannot listen")]
    Metrics {
        /// Where it was to listen.
        addr: SocketAddr,
        /// The bind's error.
        source: io::Error,
    },
    /// [`Steering::Bpf`](crate::Steering::Bpf), and the kernel did not take the steering
    /// program for a listen address.
    #[error(
        "datagrams cannot be steered to {workers} workers by connection ID on {addr} ({reason})"
    )]
    SteeringRefused {
        /// The workers to steer to.
        workers: usize,
        /// The listen address.
        addr: SocketAddr,
        /// What the kernel said.
        reason: String,
    },
    /// A listen address cannot be bound (in use, not local).
    #[error("cannot listen on {addr}")]
    Bind {
        /// The listen address.
        addr: SocketAddr,
        /// What the socket's setup refused.
        source: neqo_udp::SetupError,
    },
    /// The system refused something every server needs: a thread, a runtime, a socket handle.
    #[error("{what}")]
    Io {
        /// What was being made.
        what: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// A worker or the dispatcher failed to start, failed or panicked while serving, or
    /// stopped before the server was shut down: each one's failure, as `worker N: why`.
    #[error("{}", failures.join("; "))]
    Workers {
        /// One line per thread that failed.
        failures: Vec<String>,
    },
}

/// Why the connection-ID layout cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A worker count out of 1..=[`MAX_WORKERS`](crate::MAX_WORKERS): one byte of every
    /// connection ID tells the workers apart.
    #[error("{0} workers; 1 to {max} are possible", max = crate::MAX_WORKERS)]
    Workers(usize),
    /// A QUIC-LB server ID of this many bytes: 1 to
    /// [`MAX_SERVER_ID`](crate::MAX_SERVER_ID) are possible.
    #[error("a server ID of {0} bytes; 1 to {max} are possible", max = crate::MAX_SERVER_ID)]
    ServerIdLength(usize),
}

/// A key file ([`ServerKeys::load_or_create`](crate::ServerKeys::load_or_create)) refused:
/// the path and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct KeyFileError {
    /// The path given.
    pub path: PathBuf,
    /// What is wrong, and what to do.
    pub problem: KeyFileProblem,
}

/// What is wrong with a key file; each message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileProblem {
    /// A symbolic link: it could lead to a file others can read.
    #[error("is a symbolic link; give the file itself")]
    SymbolicLink,
    /// A FIFO, a device, a directory.
    #[error("not a regular file; give a file holding the secret")]
    NotRegular,
    /// The open failed.
    #[error("cannot open it: {0}")]
    Open(io::Error),
    /// Its metadata cannot be read.
    #[error("cannot read its metadata: {0}")]
    Metadata(io::Error),
    /// The read failed.
    #[error("cannot read it: {0}")]
    Read(io::Error),
    /// Too short or too long for a secret.
    #[error(
        "{len} bytes; a secret of {min} to {max} bytes is needed",
        min = crate::MIN_SECRET,
        max = crate::MAX_SECRET
    )]
    Size {
        /// Its whole length.
        len: u64,
    },
    /// One byte value repeated.
    #[error("all {len} bytes are 0x{byte:02x}, not a random secret; {MAKE_RANDOM}")]
    OneValue {
        /// Its length.
        len: usize,
        /// The byte.
        byte: u8,
    },
    /// Too few distinct byte values to have been drawn at random.
    #[error(
        "only {distinct} distinct byte values in {len} bytes, too few for a random secret (at \
         least {needed} needed); {MAKE_RANDOM}"
    )]
    FewValues {
        /// Distinct values in it.
        distinct: usize,
        /// Its length.
        len: usize,
        /// The fewest a secret of this length needs.
        needed: usize,
    },
    /// Owned by another user.
    #[error("owned by uid {uid}, not by this user (uid {me}); give a file of this user's")]
    Owner {
        /// Its owner.
        uid: u32,
        /// This process's effective user.
        me: u32,
    },
    /// Permission bits for group or others.
    #[error("mode {mode:04o} {}; chmod 600", mode_problem(*mode))]
    Mode {
        /// Its permission bits.
        mode: u32,
    },
    /// More than one name.
    #[error("has {0} hard links; give a file with one link: copy it, don't link it")]
    Links(u64),
    /// Its directory belongs to a user other than this one or root.
    #[error(
        "its directory {} is owned by uid {uid}, who can replace the file; move the key file \
         to a directory of this user's (uid {me}) or root's",
        dir.display()
    )]
    DirectoryOwner {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        uid: u32,
        /// This process's effective user.
        me: u32,
    },
    /// Its directory is writable by group or others.
    #[error(
        "its directory {} has mode {mode:04o}: {} can write in it; chmod go-w {}, or move the \
         key file to a directory only you can write",
        dir.display(),
        if mode & 0o002 != 0 { "all users" } else { "its group" },
        dir.display()
    )]
    DirectoryMode {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The path ends in no file name (`/`, `..`).
    #[error("not a file name; give the path of a file")]
    NotAFileName,
    /// Another starter made the file and it was removed before it could be read.
    #[error("removed while being created; start again")]
    RemovedWhileCreating,
    /// The file could not be made.
    #[error("cannot create it: {0}")]
    Create(io::Error),
}

/// What a message about a secret that is not random tells to do.
const MAKE_RANDOM: &str =
    "write random bytes to it (head -c 32 /dev/urandom) or remove it to have one made";

/// What permission bits `mode` gives others that a key file must not.
fn mode_problem(mode: u32) -> &'static str {
    if mode & 0o044 != 0 {
        "lets other users read it"
    } else if mode & 0o022 != 0 {
        "lets other users change it"
    } else {
        "gives other users access to it"
    }
}
