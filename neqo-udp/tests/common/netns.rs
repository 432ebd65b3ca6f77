//! A network namespace a test makes for itself ([`test_fixtures::netns`]), and a future run on
//! a thread inside it.

pub use test_fixtures::netns::{enter, is_root};

/// A namespace of the test's own (deleted when dropped).
pub struct Netns(test_fixtures::netns::Netns);

impl Netns {
    /// A new namespace whose loopback device is up.
    pub fn create(tag: &str) -> Self {
        Self(test_fixtures::netns::Netns::create(&format!("neqo-udp-{tag}")).unwrap())
    }

    /// Gives loopback a 100 Mbit/s token-bucket qdisc: a 1200-byte datagram leaves every
    /// ~0.1 ms, so a send buffer of a few datagrams fills at once and drains steadily.
    pub fn throttle_loopback(&self) {
        self.0.throttle_loopback("100mbit").unwrap();
    }

    /// Sets the loopback device's MTU.
    pub fn set_loopback_mtu(&self, mtu: u32) {
        self.0.set_loopback_mtu(mtu).unwrap();
    }

    /// Runs `f` on a thread that has joined the namespace, on a current-thread runtime.
    pub fn run<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        let path = self.0.path();
        std::thread::spawn(move || {
            enter(&path).expect("joining the namespace");
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f);
        })
        .join()
        .expect("test thread");
    }

    /// The path a thread opens to join the namespace with [`enter`].
    pub fn path(&self) -> std::path::PathBuf {
        self.0.path()
    }
}
