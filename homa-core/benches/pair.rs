//! Two endpoints wired back to back in memory, for benchmarks and the allocation test.
#![allow(dead_code)]

use homa_core::Instant;
use std::net::SocketAddr;

use homa_core::{Config, Endpoint, Event, Payload};

pub(crate) const SERVER_PORT: u16 = 99;

/// Keeps freed message buffers in malloc's heap, as homa-io does: a megabyte message's
/// buffer is otherwise mapped afresh, and its page faults, not the core, take the time.
pub(crate) fn keep_freed_memory() {
    // SAFETY: mallopt only sets malloc's parameters; any value is accepted or refused.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

pub(crate) struct Pair {
    pub(crate) client: Endpoint,
    pub(crate) server: Endpoint,
    pub(crate) client_addr: SocketAddr,
    pub(crate) server_addr: SocketAddr,
    pub(crate) port: u16,
    pub(crate) now: u64,
    /// The server answers with this many bytes, or echoes the request when `None`.
    pub(crate) response_len: Option<usize>,
    /// Packets are taken in GSO runs of up to this many (`poll_transmit_run`), as homa-io
    /// sends at small MTUs; 0: one by one (`poll_transmit`).
    pub(crate) run_slots: usize,
    buf: Vec<u8>,
}

impl Pair {
    pub(crate) fn new(config: Config) -> Pair {
        let mut client = Endpoint::new(config.clone()).unwrap();
        let mut server = Endpoint::new(config.clone()).unwrap();
        server.bind(SERVER_PORT).unwrap();
        let port = client.bind_ephemeral().unwrap();
        Pair {
            client,
            server,
            client_addr: "198.18.0.1:4000".parse().unwrap(),
            server_addr: "198.18.0.2:4000".parse().unwrap(),
            port,
            now: 0,
            response_len: None,
            run_slots: 0,
            buf: vec![0; config.max_packet_len() * 64],
        }
    }

    /// Moves packets both ways until neither side has any; the server echoes requests.
    /// Returns the last response delivered to the client, if any.
    pub(crate) fn exchange(&mut self) -> Option<Vec<u8>> {
        let mut response = None;
        loop {
            let mut moved = false;
            let now = Instant::from_nanos(self.now);
            if self.run_slots > 0 {
                let slot = self.client.config().max_packet_len();
                let buf = &mut self.buf[..slot * self.run_slots];
                while let Some(run) = self.client.poll_transmit_run(now, buf).unwrap() {
                    for (packet, len) in buf.chunks(slot).zip(run.lens(slot)) {
                        let _ = self.server.handle_packet(now, self.client_addr, &packet[..len]);
                    }
                    moved = true;
                }
            } else {
                while let Some(t) = self.client.poll_transmit(now, &mut self.buf).unwrap() {
                    let _ = self.server.handle_packet(now, self.client_addr, &self.buf[..t.len]);
                    moved = true;
                }
            }
            while let Some(event) = self.server.poll_event() {
                if let Event::RequestReceived { rpc, message, .. } = event {
                    let response = match self.response_len {
                        Some(len) => vec![1; len],
                        None => message,
                    };
                    self.server
                        .send_response(Instant::from_nanos(self.now), rpc, response)
                        .unwrap();
                }
            }
            while let Some(t) =
                self.server.poll_transmit(Instant::from_nanos(self.now), &mut self.buf).unwrap()
            {
                let _ = self.client.handle_packet(
                    Instant::from_nanos(self.now),
                    self.server_addr,
                    &self.buf[..t.len],
                );
                moved = true;
            }
            while let Some(event) = self.client.poll_event() {
                if let Event::ResponseReceived { message, .. } = event {
                    response = Some(message);
                }
            }
            if !moved {
                return response;
            }
        }
    }

    /// One RPC of `message`; time advances by `step` ns and due timers run.
    pub(crate) fn rpc(&mut self, message: impl Into<Payload>, step: u64) -> Vec<u8> {
        self.now += step;
        for ep in [&mut self.client, &mut self.server] {
            if ep.poll_timeout().is_some_and(|t| t.as_nanos() <= self.now) {
                ep.handle_timeout(Instant::from_nanos(self.now));
            }
        }
        self.client
            .send_request(
                Instant::from_nanos(self.now),
                self.port,
                self.server_addr,
                SERVER_PORT,
                message,
                0,
            )
            .unwrap();
        loop {
            if let Some(r) = self.exchange() {
                return r;
            }
            // Waiting on the pacer: jump to its slot.
            let next = [self.client.poll_timeout(), self.server.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .map(Instant::as_nanos);
            self.now = self.now.max(next.expect("an RPC in progress has a deadline"));
            self.client.handle_timeout(Instant::from_nanos(self.now));
            self.server.handle_timeout(Instant::from_nanos(self.now));
        }
    }
}
