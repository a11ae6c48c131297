//! `rocmc-gpu-check transfer WORKER [--device D] [--sizes 64,256,1024]`:
//! bulk transfers through a `rocmc-worker` on loopback beside a plain TLS
//! stream (rustls, the same configuration as the worker's) measured in the
//! same run, so the table says what the worker's framing and its two
//! process hops cost over TLS itself. Each buffer is checked: zeroed when
//! allocated, and read back as written.

use crate::remote::{opt, Worker};
use crate::Res;
use rocmc_remote::tls::{client_config, Identity, Pin, PinVerifier};
use rocmc_remote::Device;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Bytes per write and read call of the plain stream.
const PIECE: usize = 1 << 20;

pub fn transfer(args: &[String]) -> Res<bool> {
    let [bin, ..] = args else {
        return Err("transfer needs the worker binary".into());
    };
    let device = opt(args, "--device").unwrap_or("cpu");
    let sizes: Vec<usize> = opt(args, "--sizes")
        .unwrap_or("64,256,1024")
        .split(',')
        .map(|m| {
            m.trim()
                .parse::<usize>()
                .map_err(|e| format!("--sizes: {e}"))
        })
        .collect::<Res<_>>()?;
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    let id = Identity::load_or_create(state.path(), &["localhost".to_string()])
        .map_err(|e| e.to_string())?;
    let server = id.server_config().map_err(|e| e.to_string())?;
    let client =
        client_config(PinVerifier::new(Pin::Exact(id.fingerprint()))).map_err(|e| e.to_string())?;
    let w = Worker::start(Path::new(bin))?;
    let mut d = w.connect(device)?;
    let e = |e: rocmc_device::Error| e.to_string();
    println!(
        "device: {} ({}); worker on loopback over TLS; plain: one rustls stream on loopback, {} KiB per call",
        d.info().name,
        d.info().target,
        PIECE >> 10
    );
    println!();
    println!("| size | plain TLS, send | plain TLS, receive | worker write + wait | worker read |");
    println!("|---:|---:|---:|---:|---:|");
    for mib in sizes {
        let n = mib << 20;
        let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let send = plain(&server, &client, n, true)?;
        let recv = plain(&server, &client, n, false)?;
        let b = d.alloc(n as u64).map_err(e)?;
        d.synchronize().map_err(e)?;
        // The protocol promises zeroed buffers, whatever the memory held.
        if d.read_all(b).map_err(e)?.iter().any(|&x| x != 0) {
            return Err(format!("a fresh {mib} MiB buffer is not zeroed"));
        }
        let t = Instant::now();
        d.write(b, 0, &data)
            .and_then(|_| d.synchronize())
            .map_err(e)?;
        let write = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let back = d.read_all(b).map_err(e)?;
        let read = t.elapsed().as_secs_f64();
        if back != data {
            return Err(format!("{mib} MiB came back different"));
        }
        d.free(b).and_then(|_| d.synchronize()).map_err(e)?;
        let rate = |s: f64| n as f64 / s / 1e6;
        println!(
            "| {mib} MiB | {:.0} MB/s | {:.0} MB/s | {:.0} MB/s ({:.0} %) | {:.0} MB/s ({:.0} %) |",
            rate(send),
            rate(recv),
            rate(write),
            100.0 * send / write,
            rate(read),
            100.0 * recv / read
        );
    }
    Ok(true)
}

/// Seconds to move `n` bytes over one TLS stream on loopback, the
/// handshake excluded: from the client (`upload`) or to it, then a
/// one-byte answer.
fn plain(
    server: &Arc<rustls::ServerConfig>,
    client: &Arc<rustls::ClientConfig>,
    n: usize,
    upload: bool,
) -> Res<f64> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let cfg = server.clone();
    let peer = std::thread::spawn(move || -> Result<(), String> {
        let (tcp, _) = l.accept().map_err(|e| e.to_string())?;
        let conn = rustls::ServerConnection::new(cfg).map_err(|e| e.to_string())?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        move_bytes(&mut s, n, !upload).map_err(|e| e.to_string())
    });
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(client.clone(), name).map_err(|e| e.to_string())?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).map_err(|e| e.to_string())?;
    }
    let t = Instant::now();
    move_bytes(&mut s, n, upload).map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    peer.join().map_err(|_| "the plain TLS peer panicked")??;
    Ok(secs)
}

/// Sends `n` bytes and waits for a one-byte answer, or receives them and answers.
fn move_bytes(s: &mut impl ReadWrite, n: usize, send: bool) -> std::io::Result<()> {
    let mut buf = vec![0u8; PIECE];
    let mut left = n;
    while left > 0 {
        let k = left.min(PIECE);
        if send {
            s.write_all(&buf[..k])?;
        } else {
            s.read_exact(&mut buf[..k])?;
        }
        left -= k;
    }
    if send {
        s.flush()?;
        s.read_exact(&mut buf[..1])
    } else {
        s.write_all(&[1])?;
        s.flush()
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
