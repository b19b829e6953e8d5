//! A relay: a listener on the box's `127.0.0.1:<port>` whose every connection is piped to a Unix
//! socket of the host bound into the box (the model proxy, the egress proxy). The box has no
//! other way out: its network namespace has only its own loopback.

use std::io;
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use super::RelayPlan;

/// A relay thread's stack: they only copy bytes.
const STACK: usize = 128 * 1024;

/// Binds the listener now (so the CLI never finds the port closed) and serves it on a thread.
pub(super) fn start(plan: &RelayPlan) -> io::Result<()> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, plan.port))?;
    let socket = plan.socket.clone();
    std::thread::Builder::new().name(format!("relay-{}", plan.port)).stack_size(STACK).spawn(move || {
        for connection in listener.incoming() {
            let Ok(tcp) = connection else { continue };
            let socket = socket.clone();
            // A thread that cannot start (the box at its task limit) drops the connection.
            let _ = std::thread::Builder::new().stack_size(STACK).spawn(move || pipe(tcp, &socket));
        }
    })?;
    Ok(())
}

fn pipe(tcp: TcpStream, socket: &PathBuf) {
    // The model's answer streams as many small writes: without it each waits for the client's
    // delayed ACK (~40 ms on loopback).
    let _ = tcp.set_nodelay(true);
    let unix = match UnixStream::connect(socket) {
        Ok(unix) => unix,
        Err(err) => {
            eprintln!("tollgate-box: relay to {}: {err}", socket.display());
            return;
        }
    };
    let (Ok(mut tcp_in), Ok(mut unix_out)) = (tcp.try_clone(), unix.try_clone()) else { return };
    let upstream = std::thread::Builder::new().stack_size(STACK).spawn(move || {
        let _ = io::copy(&mut tcp_in, &mut unix_out);
        let _ = unix_out.shutdown(Shutdown::Write);
    });
    if upstream.is_err() {
        return;
    }
    let (mut unix_in, mut tcp_out) = (unix, tcp);
    let _ = io::copy(&mut unix_in, &mut tcp_out);
    let _ = tcp_out.shutdown(Shutdown::Write);
}
