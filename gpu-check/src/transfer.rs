//! `rocmc-gpu-check transfer WORKER [--device D] [--sizes 64,256,1024]`:
//! bulk transfers through a `rocmc-worker` on loopback beside a plain TLS
//! stream (rustls, the same configuration as the worker's) measured in the
//! same run, so the table says what the worker's framing and its two
//! process hops cost over TLS itself. Both move the same bytes the same
//! way: sent from a buffer in memory; an upload received into memory the
//! receiver already holds (as a device buffer is), a download into a fresh
//! allocation of the whole size (as `read_all` returns it). Each figure is the median of [`REPS`] runs. Each buffer
//! is checked: zeroed when allocated, and read back as written.

use crate::remote::Worker;
use crate::{opt, Res};
use rocmc_remote::tls::{client_config, Identity, Pin, PinVerifier};
use rocmc_remote::Device;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Bytes per write and read call of the plain stream.
const PIECE: usize = 1 << 20;

/// Runs per figure (the median is reported).
const REPS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn transfer(args: &[String]) -> Res<bool> {
    let [bin, ..] = args else {
        return Err("transfer needs the worker binary".into());
    };
    let device = opt(args, "--device")?.unwrap_or("cpu");
    let sizes: Vec<usize> = opt(args, "--sizes")?
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
        let data: Arc<Vec<u8>> = Arc::new((0..n).map(|i| (i % 251) as u8).collect());
        let (mut sends, mut recvs, mut writes, mut reads) = (vec![], vec![], vec![], vec![]);
        for _ in 0..REPS {
            sends.push(plain(&server, &client, &data, true)?);
            recvs.push(plain(&server, &client, &data, false)?);
        }
        let b = d.alloc(n as u64).map_err(e)?;
        d.synchronize().map_err(e)?;
        // The protocol promises zeroed buffers, whatever the memory held.
        if d.read_all(b).map_err(e)?.iter().any(|&x| x != 0) {
            return Err(format!("a fresh {mib} MiB buffer is not zeroed"));
        }
        for _ in 0..REPS {
            let t = Instant::now();
            d.write(b, 0, &data)
                .and_then(|_| d.synchronize())
                .map_err(e)?;
            writes.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let back = d.read_all(b).map_err(e)?;
            reads.push(t.elapsed().as_secs_f64());
            if back != *data {
                return Err(format!("{mib} MiB came back different"));
            }
        }
        d.free(b).and_then(|_| d.synchronize()).map_err(e)?;
        let (send, recv, write, read) =
            (median(sends), median(recvs), median(writes), median(reads));
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

/// Seconds to move `data` over one TLS stream on loopback, the handshake
/// excluded: from the client (`upload`) or to it, into a fresh buffer of
/// its size, then a one-byte answer.
fn plain(
    server: &Arc<rustls::ServerConfig>,
    client: &Arc<rustls::ClientConfig>,
    data: &Arc<Vec<u8>>,
    upload: bool,
) -> Res<f64> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let cfg = server.clone();
    let theirs = data.clone();
    let peer = std::thread::spawn(move || -> Result<(), String> {
        // An upload's receiver holds its memory already, touched.
        let mut held = if upload {
            vec![1u8; theirs.len()]
        } else {
            vec![]
        };
        let (tcp, _) = l.accept().map_err(|e| e.to_string())?;
        let conn = rustls::ServerConnection::new(cfg).map_err(|e| e.to_string())?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        if upload {
            receive(&mut s, &mut held)
        } else {
            send(&mut s, &theirs)
        }
        .map_err(|e| e.to_string())
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
    if upload {
        send(&mut s, data)
    } else {
        // A download lands in a fresh allocation, as `read_all` returns it.
        receive(&mut s, &mut vec![0u8; data.len()])
    }
    .map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    peer.join().map_err(|_| "the plain TLS peer panicked")??;
    Ok(secs)
}

/// Sends `data` and waits for a one-byte answer.
fn send(s: &mut impl ReadWrite, data: &[u8]) -> std::io::Result<()> {
    for piece in data.chunks(PIECE) {
        s.write_all(piece)?;
    }
    s.flush()?;
    s.read_exact(&mut [0u8; 1])
}

/// Fills `into` from the stream and answers with one byte.
fn receive(s: &mut impl ReadWrite, into: &mut [u8]) -> std::io::Result<()> {
    for piece in into.chunks_mut(PIECE) {
        s.read_exact(piece)?;
    }
    std::hint::black_box(&into);
    s.write_all(&[1])?;
    s.flush()
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
