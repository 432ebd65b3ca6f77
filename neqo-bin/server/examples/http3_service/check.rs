//! `--check`: asks the service on `server` what the example answers, over a real UDP socket
//! with neqo-h3's test client, and checks every answer byte for byte.

use std::net::SocketAddr;

use neqo_driver::{Driver, DriverConfig};
use neqo_h3::testing::{self, Client, Got, pattern_body};

/// Bytes posted to `/echo`: several flow-control windows' worth.
const POSTED: u64 = 3 << 20;

pub fn run(server: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let requests = [
        ("GET", "/hello?name=neqo"),
        ("GET", "/hello"),
        ("POST", "/echo"),
        ("GET", "/nope"),
    ];
    let mut client = Client::new(server, testing::config(), &requests).posting(POSTED);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let socket = neqo_udp::Socket::bind("127.0.0.1:0".parse()?, Default::default())?;
            let mut driver = Driver::client(vec![socket], DriverConfig::default());
            let limit = std::time::Duration::from_secs(30);
            tokio::time::timeout(limit, driver.run(&mut client, std::future::pending()))
                .await
                .map_err(|_| "no answer within 30 s")??;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    let got: Vec<Got> = client.answers().into_iter().collect::<Result<_, _>>()?;
    let json = |name: &str| format!(r#"{{"hello":"{name}","via":"HTTP/3"}}"#).into_bytes();
    let mut want = vec![
        Got::ok("GET", "/hello", json("world"), Some("application/json")),
        Got::ok(
            "GET",
            "/hello?name=neqo",
            json("neqo"),
            Some("application/json"),
        ),
        Got::ok(
            "POST",
            "/echo",
            pattern_body(POSTED),
            Some("application/octet-stream"),
        ),
        Got::status("GET", "/nope", 404),
    ];
    // The echo is streamed: its length is not known when its head is sent.
    want[2].content_length = None;
    want.sort_by_key(|g| (g.path.clone(), g.method.clone()));
    for (g, w) in got.iter().zip(&want) {
        if g != w {
            return Err(format!(
                "{} {}: got {} {:?} ({} body bytes), wanted {} {:?} ({} bytes)",
                w.method,
                w.path,
                g.status,
                g.content_type,
                g.body.len(),
                w.status,
                w.content_type,
                w.body.len()
            )
            .into());
        }
    }
    if got.len() != want.len() {
        return Err(format!("{} answers of {}", got.len(), want.len()).into());
    }
    println!(
        "{} answers right, {POSTED} bytes echoed byte for byte",
        got.len()
    );
    Ok(())
}
