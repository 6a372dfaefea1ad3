"""Homa packets as dicts: :func:`decode` and :func:`encode`, with the conformance suite's
field names (``conformance/README.md``): ``type``, ``sport``, ``dport``, ``sequence``,
``doff``, ``flags``, ``window``, ``checksum``, ``urgent``, ``sender_id`` for every packet,
plus each type's own (DATA: ``message_length``, ``incoming``, ``ack_client_id``,
``ack_server_port``, ``cutoff_version``, ``retransmit``, ``seg_offset``,
``effective_offset``, ``payload_len``, ``payload`` as hex; GRANT: ``offset``, ``priority``;
RESEND: ``offset``, ``length``, ``priority``; CUTOFFS: ``unsched_cutoffs``,
``cutoff_version``; ACK: ``num_acks``, ``acks``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _native

if TYPE_CHECKING:
    from ._native import Bytes

__all__ = ["decode", "encode"]


def decode(data: Bytes) -> dict[str, Any]:
    """Decodes one packet (bytes from the Homa common header on; trailing bytes after a
    control packet are ignored, as the Linux module ignores them). Raises
    :class:`homa.WireError`, whose ``kind`` is the error class (``truncated``,
    ``unknown_type``, ``too_many_acks``, ``bad_message_length``, ``past_message_end``,
    ``bad_priority``)."""
    return _native.wire_decode(data)


def encode(fields: dict[str, Any]) -> bytes:
    """Encodes packet fields (as :func:`decode` gives them) into bytes. Only ``type``,
    ``sport``, ``dport``, ``sender_id`` and the type's own fields are required; the rest
    take the module's defaults. ``ValueError`` names a missing or bad field."""
    return _native.wire_encode(fields)
