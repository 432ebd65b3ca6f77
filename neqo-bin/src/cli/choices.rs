//! The command line's names for the libraries' settings: clap derives its value lists from
//! these enums, and each maps onto the library type it stands for, so that no library crate
//! depends on clap.

use neqo_driver::{CongestionControl, PacingTimer, tls::CipherSuite};
use neqo_server_core::{RetryPolicy, Steering};

/// `--pacing-timer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PacingTimerArg {
    /// A timerfd where there is one (Linux); tokio's timers elsewhere.
    Precise,
    /// tokio's timers and their 1 ms grid, as on platforms without a precise timer.
    Tokio,
}

impl From<PacingTimerArg> for PacingTimer {
    fn from(a: PacingTimerArg) -> Self {
        match a {
            PacingTimerArg::Precise => Self::Precise,
            PacingTimerArg::Tokio => Self::Tokio,
        }
    }
}

/// `--cc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CcArg {
    /// RFC 9002 NewReno.
    Newreno,
    /// CUBIC (RFC 9438).
    Cubic,
    /// quinn-proto's experimental BBR.
    Bbr,
}

impl From<CcArg> for CongestionControl {
    fn from(a: CcArg) -> Self {
        match a {
            CcArg::Newreno => Self::Newreno,
            CcArg::Cubic => Self::Cubic,
            CcArg::Bbr => Self::Bbr,
        }
    }
}

/// `--cipher-suite`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CipherSuiteArg {
    /// `TLS_AES_128_GCM_SHA256`.
    Aes128gcm,
    /// `TLS_AES_256_GCM_SHA384`.
    Aes256gcm,
    /// `TLS_CHACHA20_POLY1305_SHA256`.
    Chacha20,
}

impl From<CipherSuiteArg> for CipherSuite {
    fn from(a: CipherSuiteArg) -> Self {
        match a {
            CipherSuiteArg::Aes128gcm => Self::Aes128gcm,
            CipherSuiteArg::Aes256gcm => Self::Aes256gcm,
            CipherSuiteArg::Chacha20 => Self::Chacha20,
        }
    }
}

/// `--retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RetryPolicyArg {
    /// Under load: past `--retry-half-open` handshakes in progress or `--retry-rate` new
    /// connections a second.
    Auto,
    /// Every new connection (one more round trip each).
    Always,
    /// Never.
    Never,
}

impl From<RetryPolicyArg> for RetryPolicy {
    fn from(a: RetryPolicyArg) -> Self {
        match a {
            RetryPolicyArg::Auto => Self::Auto,
            RetryPolicyArg::Always => Self::Always,
            RetryPolicyArg::Never => Self::Never,
        }
    }
}

/// `--steering`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SteeringArg {
    /// The steering program where it attaches (Linux), else the dispatcher and channels.
    Auto,
    /// The steering program only: refuse to start without it.
    Bpf,
    /// The dispatcher and channels, also where the program would attach.
    Channel,
}

impl From<SteeringArg> for Steering {
    fn from(a: SteeringArg) -> Self {
        match a {
            SteeringArg::Auto => Self::Auto,
            SteeringArg::Bpf => Self::Bpf,
            SteeringArg::Channel => Self::Channel,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;

    use super::*;

    /// Every value the command line offers maps onto a distinct library value, and each
    /// library value has a name on the command line.
    #[test]
    fn every_library_value_has_one_name() {
        let timers: Vec<PacingTimer> = PacingTimerArg::value_variants()
            .iter()
            .map(|&a| a.into())
            .collect();
        assert_eq!(timers, [PacingTimer::Precise, PacingTimer::Tokio]);
        let ccs: Vec<CongestionControl> =
            CcArg::value_variants().iter().map(|&a| a.into()).collect();
        assert_eq!(
            ccs,
            [
                CongestionControl::Newreno,
                CongestionControl::Cubic,
                CongestionControl::Bbr
            ]
        );
        let suites: Vec<CipherSuite> = CipherSuiteArg::value_variants()
            .iter()
            .map(|&a| a.into())
            .collect();
        assert_eq!(suites, CipherSuite::ALL);
        let retries: Vec<RetryPolicy> = RetryPolicyArg::value_variants()
            .iter()
            .map(|&a| a.into())
            .collect();
        assert_eq!(
            retries,
            [RetryPolicy::Auto, RetryPolicy::Always, RetryPolicy::Never]
        );
        let steerings: Vec<Steering> = SteeringArg::value_variants()
            .iter()
            .map(|&a| a.into())
            .collect();
        assert_eq!(
            steerings,
            [Steering::Auto, Steering::Bpf, Steering::Channel]
        );
    }
}
