//! Criterion group `aead`: AES-128-GCM sealing per byte, by the size of what is sealed at once,
//! with the provider both QUIC and TCP+TLS use here (ring): a QUIC packet's payload at the
//! 1500-byte link's 1472-byte datagrams (1443 bytes, plus its header protection mask), and a
//! full TLS record (16 KiB). Throughput in bytes, so criterion prints the per-byte cost of each
//! side by side (docs/records/path-mtu.md reads it).

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, quic};

/// A QUIC packet's sealed payload in a 1472-byte datagram: the datagram less a short header
/// (1 + 8-byte connection ID + 4-byte packet number) and the 16-byte tag.
const PACKET: usize = 1472 - (1 + 8 + 4) - 16;
/// The largest TLS record's plaintext (RFC 8446 section 5.1).
const RECORD: usize = 16 * 1024;
/// Bytes sealed per iteration: the same for every size, so the times compare directly.
const PER_ITER: usize = 1 << 20;

fn nonce(n: u64) -> Nonce {
    let mut b = [0; aead::NONCE_LEN];
    b[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(b)
}

fn seal(c: &mut Criterion) {
    let key = LessSafeKey::new(UnboundKey::new(&aead::AES_128_GCM, &[7; 16]).unwrap());
    let hp = quic::HeaderProtectionKey::new(&quic::AES_128, &[9; 16]).unwrap();
    let aad = [0x40; 13];
    let mut group = c.benchmark_group("aead");
    group.throughput(Throughput::Bytes(PER_ITER as u64));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));
    for (name, size, header_protection) in [
        ("seal", RECORD, false),
        ("seal", PACKET, false),
        ("seal+hp", PACKET, true),
    ] {
        let mut buf = vec![0u8; size];
        let mut n = 0u64;
        group.bench_function(BenchmarkId::new(name, size), |b| {
            b.iter(|| {
                for _ in 0..PER_ITER / size {
                    n += 1;
                    let tag = key
                        .seal_in_place_separate_tag(nonce(n), Aad::from(&aad), &mut buf)
                        .unwrap();
                    if header_protection {
                        let mask = hp.new_mask(&tag.as_ref()[..16]).unwrap();
                        let _ = std::hint::black_box(mask);
                    }
                    let _ = std::hint::black_box(tag);
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, seal);
criterion_main!(benches);
