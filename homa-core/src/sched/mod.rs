//! Scheduling: the receiver's grants (SRPT with overcommitment) and the sender's choice of
//! what to put on the wire next (control packets, retransmissions, then SRPT under a pacer).

pub(crate) mod grant;
pub(crate) mod tx;
