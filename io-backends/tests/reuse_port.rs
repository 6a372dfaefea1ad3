//! Several server sockets on one UDP port (`Builder::reuse_port`): the kernel spreads
//! clients over them, each client sticks to one, a request held by a socket that closes is
//! answered by another, and the misuses fail with `Error::SharedPort`.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use common::{bind_server, candidate_port, loopback_v4};
use homa_io::{ApiError, Error, Socket, TransportKind};

/// Clients, each with its own UDP port: enough that the kernel's hash leaves no worker
/// without one (all 32 on one of two workers: 1 in 2^31).
const CLIENTS: usize = 32;

fn shared(addr: SocketAddr) -> Arc<Socket> {
    Arc::new(Socket::builder().reuse_port(true).bind(addr).expect("a socket on the shared port"))
}

/// A port no socket holds: found with a plain socket (a shared one would join a group
/// another test process holds), then let go for the shared ones.
fn free_addr(ip: IpAddr) -> SocketAddr {
    bind_server(Socket::builder(), ip).local_addr()
}

/// Worker `n` answers each request with its number, except that the first request
/// `b"hold"` any worker sees is held, and its worker's number sent on `held`.
fn worker(
    n: u8,
    sock: &Arc<Socket>,
    hold: &Arc<AtomicBool>,
    held: mpsc::Sender<(u8, homa_io::Request)>,
) -> JoinHandle<()> {
    let (sock, hold) = (Arc::clone(sock), Arc::clone(hold));
    std::thread::spawn(move || {
        while let Ok(request) = sock.recv_request() {
            if request.message() == b"hold" && !hold.swap(true, Ordering::SeqCst) {
                held.send((n, request)).unwrap();
                continue;
            }
            request.reply(vec![n]).unwrap();
        }
    })
}

fn clients(ip: IpAddr) -> Vec<Socket> {
    (0..CLIENTS).map(|_| Socket::client(ip).unwrap()).collect()
}

#[test]
fn clients_spread_over_the_sockets_of_one_port_and_survive_one_closing() {
    let ip = loopback_v4();
    let addr = free_addr(ip);
    let workers = [shared(addr), shared(addr)];
    let hold = Arc::new(AtomicBool::new(false));
    let (held_tx, held) = mpsc::channel();
    let threads: Vec<_> = workers
        .iter()
        .enumerate()
        .map(|(n, s)| worker(n as u8, s, &hold, held_tx.clone()))
        .collect();
    let clients = clients(ip);
    let ask = |c: &Socket| c.call(addr, b"who".to_vec(), Some(Duration::from_secs(10))).unwrap()[0];

    // Each client sticks to one worker, and each worker has clients.
    let owners: Vec<u8> = clients.iter().map(ask).collect();
    for (c, &owner) in clients.iter().zip(&owners) {
        assert_eq!(ask(c), owner, "a client's calls all reach one worker");
    }
    for n in 0..2 {
        assert!(owners.contains(&n), "worker {n} got no client: {owners:?}");
    }

    // A worker closes while it holds a request: the client's call completes on the other.
    let call = clients[0].call_async(addr, b"hold".to_vec(), Some(Duration::from_secs(10)));
    let (gone, request) = held.recv().unwrap();
    workers[usize::from(gone)].shutdown();
    drop(request);
    let survivor = 1 - gone;
    let answer = call.unwrap().wait().expect("the held call completes on another worker");
    assert_eq!(answer, vec![survivor]);
    for c in &clients {
        assert_eq!(ask(c), survivor, "every client is served by the worker left");
    }
    for w in &workers {
        w.shutdown();
    }
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_shared_port_serves_only_and_only_over_udp() {
    let ip = loopback_v4();
    let server = shared(free_addr(ip));
    let dest = SocketAddr::new(ip, candidate_port());
    let calls = [
        server.call(dest, b"x".to_vec(), None).err(),
        server.call_async(dest, b"x".to_vec(), None).err(),
        server.start_call(dest, b"x".to_vec(), None).err(),
    ];
    for e in calls {
        assert!(matches!(e, Some(Error::SharedPort(_))), "{e:?}");
    }
    let client = Socket::builder().reuse_port(true).client(ip);
    assert!(matches!(client, Err(Error::SharedPort(_))), "{client:?}");
    // A socket that does not share the port cannot join those that do.
    let plain = Socket::bind(server.local_addr());
    assert!(matches!(plain, Err(Error::Api(ApiError::PortInUse(_)))), "{plain:?}");
    // Refused before any raw socket is opened: no privilege needed.
    let raw = Socket::builder().transport(TransportKind::Ip).reuse_port(true).bind(dest);
    assert!(matches!(raw, Err(Error::SharedPort(_))), "{raw:?}");
}
