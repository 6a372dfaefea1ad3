//! `control_messages`: the reading of the control data the kernel writes beside a received
//! datagram (the UDP GRO segment size) and an error-queue entry (ICMP errors), from
//! arbitrary bytes, and from well-formed messages cut at an arbitrary point, as when the
//! kernel truncates a full buffer (`MSG_CTRUNC`).
//!
//! Checks: no panic and no read outside the buffer (it sits in an allocation of exactly its
//! length, so the address sanitizer sees any); well-formed messages are read back exactly,
//! up to the last one the cut leaves whole, and none after it.

use arbitrary::{Arbitrary, Unstructured};
use homa_io::transport::control::{self, Cmsg};

/// One control message to lay out as the kernel does.
#[derive(Arbitrary, Debug)]
struct Message {
    level: i32,
    kind: i32,
    data: Vec<u8>,
}

/// An input: raw control bytes, or messages laid out and then cut.
#[derive(Arbitrary, Debug)]
enum Input {
    Raw(Vec<u8>),
    Cut { messages: Vec<Message>, cut: u16 },
}

/// A `cmsghdr` on 64-bit Linux: a `size_t` length, a level, a type.
const HEADER: usize = 16;

fn align(len: usize) -> usize {
    len.next_multiple_of(std::mem::size_of::<usize>())
}

/// `messages` laid out as the kernel writes them, and where each one ends.
fn lay_out(messages: &[Message]) -> (Vec<u8>, Vec<usize>) {
    let (mut bytes, mut ends) = (Vec::new(), Vec::new());
    for m in messages {
        let len = HEADER + m.data.len();
        bytes.extend_from_slice(&len.to_ne_bytes());
        bytes.extend_from_slice(&m.level.to_ne_bytes());
        bytes.extend_from_slice(&m.kind.to_ne_bytes());
        bytes.extend_from_slice(&m.data);
        ends.push(bytes.len());
        bytes.resize(align(bytes.len()), 0);
    }
    (bytes, ends)
}

/// Reads `bytes` from an allocation of exactly their length (so the address sanitizer sees
/// a read past them), 8-aligned as a control buffer is.
fn read_exact(bytes: &[u8]) -> (Vec<(i32, i32, Vec<u8>)>, usize) {
    let layout = std::alloc::Layout::from_size_align(bytes.len().max(1), 8).unwrap();
    // SAFETY: the layout has a non-zero size.
    let at = unsafe { std::alloc::alloc(layout) };
    assert!(!at.is_null(), "out of memory");
    // SAFETY: `at` holds `bytes.len()` bytes, all written here before they are read.
    let buf = unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
        std::slice::from_raw_parts(at, bytes.len())
    };
    let read: Vec<_> = control::control_messages(buf)
        .inspect(|c| {
            let _ = control::extended_error(*c);
        })
        .map(|Cmsg { level, kind, data }| (level, kind, data.to_vec()))
        .collect();
    let gro = control::gro_segment(buf);
    // SAFETY: allocated above with `layout`; `buf` is not used after this.
    unsafe { std::alloc::dealloc(at, layout) };
    (read, gro)
}

/// The target: see the module docs.
pub fn control_messages(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else { return };
    match input {
        Input::Raw(bytes) => {
            let (read, _) = read_exact(&bytes);
            let data: usize = read.iter().map(|(_, _, d)| HEADER + d.len()).sum();
            assert!(data <= bytes.len(), "read {data} bytes of messages from {}", bytes.len());
        }
        Input::Cut { messages, cut } => {
            let (bytes, ends) = lay_out(&messages);
            let cut = usize::from(cut).min(bytes.len());
            let (read, _) = read_exact(&bytes[..cut]);
            let whole = ends.iter().take_while(|&&end| end <= cut).count();
            let want: Vec<_> =
                messages[..whole].iter().map(|m| (m.level, m.kind, m.data.clone())).collect();
            assert_eq!(read, want, "the messages the cut at {cut} leaves whole");
        }
    }
}
