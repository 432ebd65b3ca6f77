//! TLS and transport configuration shared by client and server.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use crate::{
    driver::congestion::HandshakeFloorFactory,
    tls_counters::{self, CountingServer, CountingStore},
};
use anyhow::{Context as _, bail};
use quinn_proto::{
    AckFrequencyConfig, IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt,
    congestion::{BbrConfig, ControllerFactory, CubicConfig, NewRenoConfig},
    crypto::rustls::{QuicClientConfig, QuicServerConfig},
};
use rustls::{
    DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    pki_types::{
        CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime,
        pem::PemObject as _,
    },
};

/// HTTP/0.9 over QUIC.
pub const ALPN_HQ: &str = "hq-interop";
/// draft-banks-quic-performance.
pub const ALPN_PERF: &str = "perf";

/// Congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum CongestionControl {
    /// RFC 9002 NewReno.
    Newreno,
    /// CUBIC (RFC 9438).
    #[default]
    Cubic,
    /// quinn-proto's experimental BBR.
    Bbr,
}

/// Transport settings both sides use.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    pub idle_timeout: Duration,
    pub cc: CongestionControl,
    /// Directory for one qlog file per connection.
    pub qlog_dir: Option<PathBuf>,
    /// Bytes the peer may send ahead of what we have read, over all streams: the connection
    /// receive window, and the `initial_max_data` it is told. (The server advertises a small
    /// one, the same for every connection so that 0-RTT stays valid, and raises it per
    /// connection from its receive budget.)
    pub receive_window: u64,
    /// Send a PING when nothing ack-eliciting went out for this long. A client that only
    /// receives sends nothing but ACKs, and none once the server's packets stop reaching it:
    /// if its address changed (a NAT rebinding it) just after its last ACK, the server goes
    /// on sending to the old address and the connection stalls until the idle timeout. The
    /// PING brings the server the new address.
    pub keep_alive: Option<Duration>,
    /// `--max-mtu`: the most UDP payload path MTU discovery may probe for (1200 to
    /// [`MAX_MTU_BOUND`], within the route's MTU; [`mtu_bound`]); `None`: [`DEFAULT_MTU_BOUND`].
    pub max_mtu: Option<u16>,
    /// The largest UDP payload path MTU discovery probes up to (quinn-proto's
    /// `MtuDiscoveryConfig::upper_bound`; it starts at 1200), as [`mtu_bound`] picked it from
    /// `max_mtu` and the route: the client sets it for its server, the server for its listen
    /// addresses.
    pub mtu_upper_bound: u16,
    /// `--ack-every N`: ask the peer to acknowledge every N ack-eliciting packets rather than
    /// every second one, and at the latest after [`ACK_EVERY_MAX_DELAY`] (the ACK frequency
    /// extension; a peer without it ignores the request). `None`: RFC 9000's every second.
    pub ack_every: Option<u32>,
}

/// How long a peer asked for fewer ACKs (`--ack-every`) may hold one back: short, because a
/// flight of fewer than N packets (slow start, a small window after loss) waits this long for
/// its ACK, which delays the window's growth; the peer's default (25 ms) would cost a
/// round trip of that length each time.
pub const ACK_EVERY_MAX_DELAY: Duration = Duration::from_millis(2);

/// The MTU discovery bound where nothing better is known: 1452 bytes of UDP payload fit a
/// 1500-byte Ethernet MTU over IPv4 and IPv6 (quinn-proto's default).
pub const DEFAULT_MTU_BOUND: u16 = 1452;

/// The least: every QUIC path carries 1200-byte datagrams (RFC 9000 section 14).
pub const MIN_MTU_BOUND: u16 = 1200;

/// Most bytes of UDP payload QUIC sends (RFC 9000's `max_udp_payload_size` limit).
pub const MAX_MTU_BOUND: u16 = 65_527;

/// The bound for path MTU discovery towards `peer`: [`DEFAULT_MTU_BOUND`] unless `max_mtu`
/// says otherwise, and then `max_mtu` within what the route to `peer` carries where that is
/// known ([`neqo_udp::max_udp_payload_to`]): `--max-mtu 65527` probes up to the route's MTU,
/// 8972 bytes on a jumbo-frame interface, 65507 on loopback.
///
/// Probing above the path MTU is safe (lost probes only end the search) but not free:
/// quinn-proto searches by halving from 1200 to the bound, a dozen padded probes per
/// connection, each tens of kilobytes up to loopback's 64 KiB, which hundreds of short
/// connections cannot afford (README, "Path MTU"). Hence a default that fits Ethernet, and
/// large datagrams where they are asked for.
#[must_use]
pub fn mtu_bound(peer: Option<SocketAddr>, max_mtu: Option<u16>) -> u16 {
    let Some(max) = max_mtu else {
        return DEFAULT_MTU_BOUND;
    };
    let route = peer
        .and_then(|p| neqo_udp::max_udp_payload_to(p).ok())
        .map(|m| u16::try_from(m).unwrap_or(MAX_MTU_BOUND));
    route.map_or(max, |r| max.min(r)).max(MIN_MTU_BOUND)
}

/// Requests (bidirectional streams) a peer may have open at once on a connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// The client's default [`TransportOptions::keep_alive`]: a stalled path recovers within it,
/// for one small datagram a second on an idle connection.
pub const CLIENT_KEEP_ALIVE: Duration = Duration::from_secs(1);

impl Default for TransportOptions {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(10),
            cc: CongestionControl::default(),
            qlog_dir: None,
            receive_window: 64 << 20,
            keep_alive: None,
            max_mtu: None,
            mtu_upper_bound: DEFAULT_MTU_BOUND,
            ack_every: None,
        }
    }
}

impl TransportOptions {
    /// A transport config; with a qlog stream named after `label` when `--qlog-dir` is set.
    ///
    /// # Errors
    /// An idle timeout out of range, or a qlog file that cannot be created.
    pub fn transport(&self, label: &str) -> anyhow::Result<TransportConfig> {
        let mut t = TransportConfig::default();
        t.max_idle_timeout(Some(
            IdleTimeout::try_from(self.idle_timeout).context("idle timeout out of range")?,
        ));
        // Loopback with two busy cores sees millisecond RTTs under load: large windows.
        t.stream_receive_window(VarInt::from_u32(16 << 20));
        t.receive_window(
            VarInt::from_u64(self.receive_window).context("receive window too large")?,
        );
        t.send_window(32 << 20);
        t.max_concurrent_bidi_streams(VarInt::from_u32(MAX_CONCURRENT_STREAMS));
        t.max_concurrent_uni_streams(VarInt::from_u32(0));
        // No protocol here uses DATAGRAM frames (RFC 9221): not advertising them makes a peer
        // that sends one a protocol violation, where quinn-proto's default would buffer
        // about 1.25 MB of them per connection that nothing ever reads.
        t.datagram_receive_buffer_size(None);
        t.keep_alive_interval(self.keep_alive);
        if let Some(n) = self.ack_every {
            let mut ack = AckFrequencyConfig::default();
            ack.ack_eliciting_threshold(VarInt::from_u32(n.saturating_sub(1)))
                .max_ack_delay(Some(ACK_EVERY_MAX_DELAY));
            t.ack_frequency_config(Some(ack));
        }
        let mut mtud = MtuDiscoveryConfig::default();
        mtud.upper_bound(self.mtu_upper_bound);
        t.mtu_discovery_config(Some(mtud));
        let cc: Arc<dyn ControllerFactory + Send + Sync> = match self.cc {
            CongestionControl::Newreno => Arc::new(NewRenoConfig::default()),
            CongestionControl::Cubic => Arc::new(CubicConfig::default()),
            CongestionControl::Bbr => Arc::new(BbrConfig::default()),
        };
        t.congestion_controller_factory(Arc::new(HandshakeFloorFactory::new(cc)));
        if let Some(dir) = &self.qlog_dir {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating qlog dir {}", dir.display()))?;
            let path = dir.join(format!("{label}.sqlog"));
            let file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            let mut q = quinn_proto::QlogConfig::default();
            q.writer(Box::new(std::io::BufWriter::new(file)))
                .title(Some(label.to_owned()));
            t.qlog_stream(q.into_stream());
        }
        Ok(t)
    }
}

/// A qlog file name unique in this process: `SIDE-PID-N`.
#[must_use]
pub fn qlog_label(side: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{side}-{}-{n}", std::process::id())
}

/// A certificate chain and its key.
#[derive(Debug)]
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// A self-signed certificate for localhost, 127.0.0.1 and ::1.
    ///
    /// # Errors
    /// When rcgen fails.
    pub fn self_signed() -> anyhow::Result<Self> {
        let ck = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ])
        .context("generating a self-signed certificate")?;
        Ok(Self {
            chain: vec![ck.cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()).into(),
        })
    }

    /// Reads a PEM certificate chain and a PEM private key.
    ///
    /// # Errors
    /// Unreadable or empty files, with the path in the message.
    pub fn from_pem_files(cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let chain = read_certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
            anyhow::anyhow!(
                "cannot read private key {}: {}",
                key.display(),
                pem_error(&e)
            )
        })?;
        Ok(Self { chain, key })
    }
}

fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item found".to_owned(),
        other => format!("{other:?}"),
    }
}

/// Reads PEM certificates.
///
/// # Errors
/// Unreadable file or no certificate in it.
pub fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot read certificate {}: {}",
                path.display(),
                pem_error(&e)
            )
        })?;
    if certs.is_empty() {
        bail!("no certificate in {}", path.display());
    }
    Ok(certs)
}

/// A TLS 1.3 cipher suite a client may offer (`--cipher-suite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum CipherSuite {
    /// `TLS_AES_128_GCM_SHA256`.
    Aes128gcm,
    /// `TLS_AES_256_GCM_SHA384`.
    Aes256gcm,
    /// `TLS_CHACHA20_POLY1305_SHA256`.
    Chacha20,
}

impl CipherSuite {
    /// All three, in the order offered: TLS 1.3's mandatory AES-128-GCM-SHA256 first. ring's
    /// default order puts AES-256-GCM-SHA384 first: 14 AES rounds instead of 10 on every
    /// packet, and SHA-384 (no SHA extensions on x86) for the handshake's transcript and key
    /// schedule. Every suite stays offered, so peers preferring another still get it.
    pub const ALL: [Self; 3] = [Self::Aes128gcm, Self::Aes256gcm, Self::Chacha20];

    fn rustls(self) -> rustls::SupportedCipherSuite {
        use rustls::crypto::ring::cipher_suite;
        match self {
            Self::Aes128gcm => cipher_suite::TLS13_AES_128_GCM_SHA256,
            Self::Aes256gcm => cipher_suite::TLS13_AES_256_GCM_SHA384,
            Self::Chacha20 => cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        }
    }
}

/// ring offering `suites`, in that order.
fn provider_with(suites: &[CipherSuite]) -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: suites.iter().map(|s| s.rustls()).collect(),
        ..rustls::crypto::ring::default_provider()
    })
}

/// SSLKEYLOGFILE, when set.
fn key_log() -> Option<Arc<dyn rustls::KeyLog>> {
    std::env::var_os("SSLKEYLOGFILE")
        .map(|_| Arc::new(rustls::KeyLogFile::new()) as Arc<dyn rustls::KeyLog>)
}

/// A TLS 1.3 server config offering `alpns` and accepting `suites`, with the certificate
/// and key of `identity` and `SSLKEYLOGFILE`: what the QUIC server and a TLS-over-TCP server
/// share.
fn server_tls(
    identity: &Identity,
    alpns: &[String],
    suites: &[CipherSuite],
) -> anyhow::Result<rustls::ServerConfig> {
    if suites.is_empty() {
        bail!("no cipher suite to accept");
    }
    let mut tls = rustls::ServerConfig::builder_with_provider(provider_with(suites))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .context("certificate and key do not fit together")?;
    tls.alpn_protocols = alpns.iter().map(|a| a.as_bytes().to_vec()).collect();
    if let Some(k) = key_log() {
        tls.key_log = k;
    }
    Ok(tls)
}

/// A QUIC server crypto config offering `alpns`.
///
/// # Errors
/// A key that does not match the certificate or is unsupported.
pub fn server_crypto(
    identity: &Identity,
    alpns: &[String],
) -> anyhow::Result<Arc<dyn quinn_proto::crypto::ServerConfig>> {
    let mut tls = server_tls(identity, alpns, &CipherSuite::ALL)?;
    tls.max_early_data_size = u32::MAX;
    // Counted, so that the report says how many clients resumed.
    tls.session_storage = Arc::new(CountingStore(tls.session_storage.clone()));
    Ok(Arc::new(CountingServer(Arc::new(
        QuicServerConfig::try_from(tls)?,
    ))))
}

/// A TLS 1.3 server config for TLS over TCP (no ALPN), accepting `suites` (the client's
/// order decides among them, as in QUIC): the QUIC server's provider, protocol version and
/// certificate handling.
///
/// # Errors
/// No suite, or a key that does not match the certificate or is unsupported.
pub fn stream_server_config(
    identity: &Identity,
    suites: &[CipherSuite],
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    Ok(Arc::new(server_tls(identity, &[], suites)?))
}

/// Whom the client trusts.
#[derive(Debug, Clone, Default)]
pub enum Trust {
    /// Nobody: every certificate is untrusted (there is no system store here).
    #[default]
    Nobody,
    /// Anything: no verification (`--insecure`).
    Insecure,
    /// These CA (or self-signed) certificates.
    Certs(Vec<CertificateDer<'static>>),
}

/// A QUIC client crypto config asking for `alpn`, offering every cipher suite.
///
/// # Errors
/// A CA certificate rustls rejects.
pub fn client_crypto(trust: &Trust, alpn: &str) -> anyhow::Result<Arc<QuicClientConfig>> {
    client_crypto_with(trust, alpn, &CipherSuite::ALL)
}

/// A QUIC client crypto config asking for `alpn` and offering only `suites`.
///
/// # Errors
/// A CA certificate rustls rejects, or no suite.
pub fn client_crypto_with(
    trust: &Trust,
    alpn: &str,
    suites: &[CipherSuite],
) -> anyhow::Result<Arc<QuicClientConfig>> {
    let mut tls = client_tls(trust, suites)?;
    tls.alpn_protocols = vec![alpn.as_bytes().to_vec()];
    tls.enable_early_data = true;
    // The Initial packets are protected with AES-128-GCM whatever the suites offered
    // (RFC 9001 section 5.2), so that suite is named separately for them.
    let initial = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(rustls::Tls13CipherSuite::quic_suite)
        .context("ring has no QUIC AES-128-GCM suite")?;
    Ok(Arc::new(QuicClientConfig::with_initial(
        Arc::new(tls),
        initial,
    )?))
}

/// A TLS 1.3 client config for TLS over TCP (no ALPN), offering `suites` in that order: the
/// QUIC client's provider, protocol version and certificate verification.
///
/// # Errors
/// A CA certificate rustls rejects, or no suite.
pub fn stream_client_config(
    trust: &Trust,
    suites: &[CipherSuite],
) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    Ok(Arc::new(client_tls(trust, suites)?))
}

/// A TLS 1.3 client config offering `suites`, trusting as `trust` says, with
/// `SSLKEYLOGFILE`: what the QUIC client and a TLS-over-TCP client share.
fn client_tls(trust: &Trust, suites: &[CipherSuite]) -> anyhow::Result<rustls::ClientConfig> {
    if suites.is_empty() {
        bail!("no cipher suite to offer");
    }
    let provider = provider_with(suites);
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let verifier: Arc<dyn ServerCertVerifier> = match trust {
        // No anchor: rustls refuses every certificate at the handshake (its verifier's
        // builder would refuse the empty store up front), so no full handshake to count.
        Trust::Nobody => {
            let mut tls = builder
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            if let Some(k) = key_log() {
                tls.key_log = k;
            }
            return Ok(tls);
        }
        Trust::Insecure => Arc::new(NoVerify(provider)),
        Trust::Certs(certs) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs {
                roots.add(c.clone()).context("adding a CA certificate")?;
            }
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .context("building the certificate verifier")?
        }
    };
    // Counted: a resumed handshake has no certificate to verify.
    let mut tls = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(CountingVerifier(verifier)))
        .with_no_client_auth();
    if let Some(k) = key_log() {
        tls.key_log = k;
    }
    Ok(tls)
}

/// Counts the certificates verified, i.e. the full handshakes
/// ([`TlsCounters::full_handshakes`](crate::tls_counters::TlsCounters::full_handshakes)).
#[derive(Debug)]
struct CountingVerifier(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for CountingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        tls_counters::count_full_handshake();
        self.0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The ALPN a connection negotiated.
#[must_use]
pub fn negotiated_alpn(conn: &quinn_proto::Connection) -> Option<String> {
    let data = conn.crypto_session().handshake_data()?;
    let hd = data
        .downcast::<quinn_proto::crypto::rustls::HandshakeData>()
        .ok()?;
    hd.protocol.and_then(|p| String::from_utf8(p).ok())
}
