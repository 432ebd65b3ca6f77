//! An HTTP/3 service of your own behind neqo-server's machinery (workers, Retry, admission,
//! receive budgets, metrics, GOAWAY at shutdown): `GET /hello?name=N` answers JSON,
//! `POST /echo` streams the request body back as it arrives, anything else is 404.
//!
//! `cargo run --release -p neqo-server-core --example http3_service [ADDR]` serves on ADDR
//! (default 127.0.0.1:4433) until Ctrl-C, with a self-signed certificate for localhost;
//! `-- --check` serves on a free port, asks itself both and checks the answers byte for byte.

mod check;

use http::{Method, Request, Response, StatusCode, header::CONTENT_TYPE};
use neqo_server_core::{
    BoxError, RequestBody, ResponseBody, Server, ServerConfig, ServerHandle, service_fn,
};

async fn route(request: Request<RequestBody>) -> Result<Response<ResponseBody>, BoxError> {
    let response = Response::builder();
    Ok(match (request.method(), request.uri().path()) {
        (&Method::GET, "/hello") => {
            let name = request
                .uri()
                .query()
                .and_then(|q| q.strip_prefix("name="))
                .unwrap_or("world");
            let body = serde_json::json!({ "hello": name, "via": "HTTP/3" }).to_string();
            response
                .header(CONTENT_TYPE, "application/json")
                .body(body.into())?
        }
        // The request's body is the response's: read only as fast as the client takes the
        // echo, so a client that stops reading is held back by flow control.
        (&Method::POST, "/echo") => response
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(request.into_body().into())?,
        _ => response
            .status(StatusCode::NOT_FOUND)
            .body(ResponseBody::empty())?,
    })
}

fn config(addr: std::net::SocketAddr) -> ServerConfig {
    let mut config = ServerConfig::http3(service_fn(route));
    config.listen = vec![addr];
    config
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("--check") {
        let server = ServerHandle::start(config("127.0.0.1:0".parse()?))?;
        check::run(server.addr())?;
        let report = server.stop()?;
        println!("checked: {}", report.summary());
        return Ok(());
    }
    let addr = arg.as_deref().unwrap_or("127.0.0.1:4433").parse()?;
    let server = Server::bind(config(addr))?;
    println!("listening on {:?}", server.local_addrs());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(server.run(async {
            let _ = tokio::signal::ctrl_c().await;
        }))?;
    Ok(())
}
