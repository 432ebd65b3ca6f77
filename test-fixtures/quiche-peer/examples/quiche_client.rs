//! `cargo run --release -p quiche-peer --features quiche --example quiche_client -- ADDR PATH`:
//! quiche on neqo-udp's socket requests `PATH` (an hq-interop path, `/N` for N generated
//! bytes) from the hq-interop server at `ADDR` (`neqo-server`, say) and prints what it got
//! and how many datagrams each syscall carried.

use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(addr), Some(path)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: quiche_client ADDR PATH (e.g. 127.0.0.1:4433 /1048576)");
    };
    let addr = addr.parse()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let got = rt.block_on(quiche_peer::get(
        addr,
        &path,
        neqo_udp::Config::default(),
        Duration::from_secs(60),
    ))?;
    println!(
        "{} bytes in {:.3?} ({}), datagrams per syscall: rx {:.2} tx {:.2}; quiche: {} packets sent, {} received, {} lost",
        got.bytes,
        got.elapsed,
        if got.pattern_ok {
            "the generated body, byte for byte"
        } else {
            "NOT the generated body"
        },
        got.socket.rx.datagrams_per_syscall(),
        got.socket.tx.datagrams_per_syscall(),
        got.quic.sent,
        got.quic.recv,
        got.quic.lost,
    );
    if !got.pattern_ok {
        std::process::exit(1);
    }
    Ok(())
}
