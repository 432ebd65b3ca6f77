//! The server config of a connection with a qlog stream of its own (`--qlog-dir`): the
//! endpoint's, with its transport and the stream.

use std::sync::Arc;

use quinn_proto::ServerConfig;

use super::MIN_WINDOW;
use crate::tls::{self, TransportOptions};

pub(super) struct QlogConfigs {
    base: Arc<ServerConfig>,
    transport: TransportOptions,
}

impl QlogConfigs {
    pub(super) fn new(base: Arc<ServerConfig>, transport: TransportOptions) -> Self {
        Self {
            base,
            transport: TransportOptions {
                // As the endpoint's: every connection is told the same, then raised.
                receive_window: MIN_WINDOW,
                ..transport
            },
        }
    }

    /// A config with a new qlog stream, or `None` (the endpoint's will do) without
    /// `--qlog-dir` or when the stream cannot be made (logged).
    pub(super) fn next(&self) -> Option<Arc<ServerConfig>> {
        self.transport.qlog_dir.as_ref()?;
        match self.transport.transport(&tls::qlog_label("server")) {
            Ok(t) => {
                let mut sc = (*self.base).clone();
                sc.transport_config(Arc::new(t));
                Some(Arc::new(sc))
            }
            Err(e) => {
                tracing::warn!("qlog: {e:#}");
                None
            }
        }
    }
}
