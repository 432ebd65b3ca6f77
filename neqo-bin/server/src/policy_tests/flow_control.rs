//! Flow control: an upload many times its connection window.

use super::*;

/// Uploads `len` pattern bytes with `perf` on one stream through [`body::Source`] (as the
/// client does), and reads the empty response to its FIN.
struct Uploader {
    config: Option<quinn_proto::ClientConfig>,
    source: neqo_protocols::body::Source,
    stream: Option<quinn_proto::StreamId>,
    finished_writing: bool,
    response_fin: bool,
}

impl Uploader {
    fn pump(&mut self, conn: &mut quinn_proto::Connection) {
        if let Some(id) = self.stream
            && !self.finished_writing
            && let Ok(neqo_protocols::body::Pumped::Finished) =
                self.source.pump(&mut conn.send_stream(id))
        {
            self.finished_writing = true;
        }
    }
}

impl Application for Uploader {
    fn event(
        &mut self,
        _: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        now: Instant,
    ) {
        match ev {
            Event::Connected => {
                self.stream = conn.streams().open(Dir::Bi);
                self.pump(conn);
            }
            Event::Stream(StreamEvent::Writable { .. }) => self.pump(conn),
            Event::Stream(StreamEvent::Readable { id })
                if neqo_protocols::body::read_stream(conn, id, |_| {
                    std::ops::ControlFlow::Continue(())
                }) == neqo_protocols::body::ReadEnd::Fin =>
            {
                self.response_fin = true;
                conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
            }
            _ => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take() {
            driver.connect(0, config, SERVER, "localhost", now).unwrap();
        }
        None
    }
}

/// An upload far larger than the server's connection window (a budget of minimal windows):
/// the uploader is held back by connection-level flow control over and over, each time part
/// way through a chunk, and must be woken by every MAX_DATA. It completes, every byte counted.
#[test]
fn an_upload_many_times_its_connection_window_completes() {
    const UPLOAD: u64 = 2 << 20;
    let c = minimal_budget();
    let mut b = Bench::new(c, &[], &[]);
    let mut client_config = quinn_proto::ClientConfig::new(
        tls::client_crypto(&Trust::Insecure, neqo_protocols::ALPN_PERF).unwrap(),
    );
    client_config.transport_config(Arc::new(
        TransportOptions::default().transport("client").unwrap(),
    ));
    let mut up = Uploader {
        config: Some(client_config),
        source: neqo_protocols::body::Source::pattern(
            Some(Bytes::copy_from_slice(
                &neqo_protocols::perf::request_header(0),
            )),
            UPLOAD,
        ),
        stream: None,
        finished_writing: false,
        response_fin: false,
    };
    let mut client = Driver::with_datapaths(
        vec![b.net.path(client(20, 5000), Behaviour::default())],
        EndpointConfig::default(),
        None,
        neqo_driver::DriverConfig::default(),
    );
    for turn in 0..TURNS {
        let s = b.net.turn(&mut b.server, &mut b.app).unwrap();
        let c = b.net.turn(&mut client, &mut up).unwrap();
        if up.response_fin {
            break;
        }
        let queued = b.server.queued_datagrams() + client.queued_datagrams() > 0;
        assert!(
            b.net.advance(&[s.deadline, c.deadline], queued),
            "the upload stalled at turn {turn}: {} of {UPLOAD} B received by the server",
            b.app.report.bytes_received
        );
    }
    assert!(up.response_fin, "the upload completed");
    assert_eq!(b.app.report.receive_windows, MIN_WINDOW);
    assert_eq!(
        b.app.report.bytes_received,
        UPLOAD + neqo_protocols::perf::HEADER_LEN as u64
    );
}
