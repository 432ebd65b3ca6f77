//! A driver on a runtime of its own, for tools and tests that bring their own [`Application`]
//! (a load generator, a hostile or scripted client): sockets bound, a current-thread runtime,
//! run until the application is done.

use std::{io, net::SocketAddr};

use super::{Application, Driver, DriverConfig};

/// Runs `app` as a client until it is done, over `sockets` neqo-udp sockets (default config)
/// bound to `local` (port 0: any), paced, on a new current-thread runtime on this thread.
///
/// # Errors
/// The runtime or a socket could not be made, or a socket failed.
pub fn run_client<A: Application>(
    app: &mut A,
    local: SocketAddr,
    sockets: usize,
) -> io::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let sockets = (0..sockets)
                .map(|_| neqo_udp::Socket::bind(local, neqo_udp::Config::default()))
                .collect::<Result<Vec<_>, _>>()?;
            Driver::client(sockets, DriverConfig::default())
                .run(app, std::future::pending())
                .await
        })
}
