//! The messages a run creates, as the simulated hosts and the SRPT oracle both see them.

/// A message as created: hosts, size, creation time (ns), and whether it is measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg {
    pub(crate) src: u32,
    pub(crate) dst: u32,
    pub(crate) size_index: u32,
    pub(crate) created: u64,
    pub(crate) measured: bool,
}
