//! How datagrams reach the workers, and the listen sockets bound for it. With several
//! workers, every listen address has a socket per worker in one `SO_REUSEPORT` group, and the
//! kernel's steering program hands each datagram to the worker whose index its destination
//! connection ID carries (`cid`), so a connection stays on its worker when its client's
//! address or port changes. Where that program cannot be attached (not Linux, or the kernel
//! refuses it) or [`Steering::Channel`] asks for it, every listen address has one socket
//! instead, read by a dispatcher thread that hands each datagram to its worker by the same
//! rule over a bounded channel (`dispatch`); the workers send on that socket directly.

use std::net::SocketAddr;

use super::{ServerError, cid::CidLayout, dispatch::CHANNEL_CAPACITY};

/// How datagrams reach the workers when there are several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Steering {
    /// The steering program where it attaches (Linux), else the dispatcher and channels.
    #[default]
    Auto,
    /// The steering program only: refuse to start without it.
    Bpf,
    /// The dispatcher and channels, also where the program would attach (to test and
    /// measure them).
    Channel,
}

/// Binds a group of `count` sockets on `addr`.
fn group(
    addr: SocketAddr,
    count: usize,
    steering: Option<neqo_udp::CidSteering>,
) -> Result<(neqo_udp::ReuseportGroup, SocketAddr), ServerError> {
    let group = neqo_udp::bind_reuseport_group(addr, count, steering)
        .map_err(|source| ServerError::Bind { addr, source })?;
    let bound = group.local_addr().map_err(|source| ServerError::Io {
        what: "the address of a bound socket",
        source,
    })?;
    Ok((group, bound))
}

/// The bound sockets.
pub(super) struct Bound {
    pub(super) sockets: BoundSockets,
    /// The listen addresses, with their real ports.
    pub(super) addrs: Vec<SocketAddr>,
    /// How datagrams reach the workers, for the report.
    pub(super) steering: String,
}

/// The sockets of [`Bound`], as the workers will take them.
pub(super) enum BoundSockets {
    /// Each worker's sockets, one per listen address (the steering program's groups).
    PerWorker(Vec<Vec<std::net::UdpSocket>>),
    /// One socket per listen address, read by the dispatcher.
    Shared {
        sockets: Vec<std::net::UdpSocket>,
        steering: neqo_udp::CidSteering,
        workers: usize,
    },
}

/// Binds the listen addresses: with several workers, a socket per worker on each, steered by
/// the worker byte of `layout`'s connection IDs, or one socket each read by a dispatcher,
/// as `steering` says.
///
/// # Errors
/// A bind failure, or `Steering::Bpf` where the steering program cannot be attached.
pub(super) fn bind(
    listen: &[SocketAddr],
    layout: &CidLayout,
    steering: Steering,
) -> Result<Bound, ServerError> {
    let workers = layout.workers();
    let cid = neqo_udp::CidSteering::new(
        u8::try_from(layout.worker_offset()).expect("within a 20-byte CID"),
    );
    let mut addrs = Vec::new();
    if workers == 1 {
        let mut sockets = Vec::new();
        for addr in listen {
            let (group, bound) = group(*addr, 1, None)?;
            addrs.push(bound);
            sockets.extend(group.sockets);
        }
        return Ok(Bound {
            sockets: BoundSockets::PerWorker(vec![sockets]),
            addrs,
            steering: "one worker".to_owned(),
        });
    }
    // Why the program is not used, where it is not.
    let mut fallback = match steering {
        Steering::Channel => Some("channel steering asked for".to_owned()),
        Steering::Auto if !cfg!(target_os = "linux") => {
            Some("no steering program on this platform".to_owned())
        }
        Steering::Auto | Steering::Bpf => None,
    };
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> = (0..workers).map(|_| Vec::new()).collect();
    if fallback.is_none() {
        for addr in listen {
            let (group, bound) = group(*addr, workers, Some(cid))?;
            if let neqo_udp::Steering::Hash(reason) = &group.steering {
                if steering == Steering::Bpf {
                    return Err(ServerError::SteeringRefused {
                        workers,
                        addr: *addr,
                        reason: reason.to_string(),
                    });
                }
                fallback = Some(reason.to_string());
                break;
            }
            addrs.push(bound);
            for (w, s) in group.sockets.into_iter().enumerate() {
                per_worker[w].push(s);
            }
        }
    }
    let Some(reason) = fallback else {
        return Ok(Bound {
            sockets: BoundSockets::PerWorker(per_worker),
            addrs,
            steering: format!("{workers} workers, by connection ID (SO_REUSEPORT, classic BPF)"),
        });
    };
    // The groups bound so far are closed here, so the fixed ports they held are free again.
    drop(per_worker);
    addrs.clear();
    let mut sockets = Vec::new();
    for addr in listen {
        // A group of one: a plain socket, without SO_REUSEPORT, so nothing can join it.
        let (group, bound) = group(*addr, 1, None)?;
        addrs.push(bound);
        sockets.extend(group.sockets);
    }
    Ok(Bound {
        sockets: BoundSockets::Shared {
            sockets,
            steering: cid,
            workers,
        },
        addrs,
        steering: format!(
            "{workers} workers, by connection ID (one socket, a dispatcher thread, channels of \
             {CHANNEL_CAPACITY} datagrams; {reason})"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's refusal, as [`bind`] reports it: one line naming the workers, the
    /// address and the kernel's reason.
    #[test]
    fn the_kernel_refusing_the_program_is_one_line() {
        let reason = neqo_udp::HashReason::Refused(neqo_udp::SetupError::new(
            neqo_udp::Refused::SteeringProgram,
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "Operation not permitted",
            ),
        ));
        let e = ServerError::SteeringRefused {
            workers: 2,
            addr: "127.0.0.1:4433".parse().unwrap(),
            reason: reason.to_string(),
        };
        let m = e.to_string();
        assert!(
            m.starts_with(
                "datagrams cannot be steered to 2 workers by connection ID on 127.0.0.1:4433 ("
            ),
            "{m}"
        );
        assert!(m.contains("not permitted"), "{m}");
        assert!(!m.contains('\n') && !m.contains("--"), "{m}");
    }
}
