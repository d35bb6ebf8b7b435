//! The envelope of every object the checkpoint writes: a magic, what the object is, the length
//! and SHA-256 of its payload, then the payload. A restore checks all three before it uses a
//! byte, so a truncated or corrupted object is an error that names the object, never a
//! half-restored database (SQLite's own WAL recovery would silently stop at a bad frame).

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

/// The first bytes of every checkpoint object, with the format's version.
const MAGIC: &[u8; 8] = b"ANYCKPT1";
/// Magic, kind, length, SHA-256.
const HEADER_LEN: usize = 8 + 1 + 8 + 32;

/// What an object holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The whole database file at the start of a generation.
    Snapshot,
    /// WAL bytes: whole committed transactions, appended in order.
    Wal,
    /// The end of a generation: whoever took the bucket over wrote it where the next WAL
    /// segment would go, so that the previous writer's next write fails.
    Seal,
    /// A file of the API's identity (its token, its sealing key).
    Identity,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Self::Snapshot => b'S',
            Self::Wal => b'W',
            Self::Seal => b'X',
            Self::Identity => b'I',
        }
    }

    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            b'S' => Some(Self::Snapshot),
            b'W' => Some(Self::Wal),
            b'X' => Some(Self::Seal),
            b'I' => Some(Self::Identity),
            _ => None,
        }
    }
}

/// Wraps a payload.
pub fn seal(kind: Kind, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_LEN + payload.len());
    out.put_slice(MAGIC);
    out.put_u8(kind.byte());
    out.put_u64(payload.len() as u64);
    out.put_slice(&Sha256::digest(payload));
    out.put_slice(payload);
    out.freeze()
}

/// Why an object could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// Not one of ours.
    #[error("it is not an anycloud checkpoint object (it does not start with {MAGIC:?})")]
    NotOurs,
    /// Shorter than its header says.
    #[error("it is truncated: {found} bytes of payload where its header says {expected}")]
    Truncated {
        /// Payload bytes present.
        found: usize,
        /// Payload bytes announced.
        expected: u64,
    },
    /// Longer than its header says.
    #[error("it has {extra} bytes after its payload")]
    TrailingBytes {
        /// Bytes past the payload.
        extra: usize,
    },
    /// The bytes are not the ones written.
    #[error("it is corrupted: its payload's SHA-256 is not the one recorded when it was written")]
    Corrupted,
    /// Another kind than expected.
    #[error("it holds a {found:?} where a {expected:?} was expected")]
    WrongKind {
        /// What it holds.
        found: Kind,
        /// What was expected.
        expected: Kind,
    },
}

/// Checks an object and returns its kind and payload.
pub fn open(object: &Bytes) -> Result<(Kind, Bytes), Damage> {
    if object.len() < 9 || &object[..8] != MAGIC {
        return Err(Damage::NotOurs);
    }
    let kind = Kind::from_byte(object[8]).ok_or(Damage::NotOurs)?;
    if object.len() < HEADER_LEN {
        return Err(Damage::Truncated { found: 0, expected: 0 });
    }
    let expected = u64::from_be_bytes(object[9..17].try_into().map_err(|_| Damage::NotOurs)?);
    let payload = object.slice(HEADER_LEN..);
    let announced = usize::try_from(expected).unwrap_or(usize::MAX);
    if payload.len() < announced {
        return Err(Damage::Truncated { found: payload.len(), expected });
    }
    if payload.len() > announced {
        return Err(Damage::TrailingBytes { extra: payload.len() - announced });
    }
    if Sha256::digest(&payload).as_slice() != &object[17..49] {
        return Err(Damage::Corrupted);
    }
    Ok((kind, payload))
}

/// [`open`], expecting one kind.
pub fn open_as(expected: Kind, object: &Bytes) -> Result<Bytes, Damage> {
    let (found, payload) = open(object)?;
    if found != expected {
        return Err(Damage::WrongKind { found, expected });
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_opens_to_what_was_sealed() {
        let object = seal(Kind::Wal, b"frames");
        let (kind, payload) = open(&object).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!((kind, &payload[..]), (Kind::Wal, &b"frames"[..]));
        assert!(matches!(open_as(Kind::Snapshot, &object), Err(Damage::WrongKind { .. })));
    }

    #[test]
    fn damage_is_named() {
        let object = seal(Kind::Snapshot, &[7u8; 100]);
        let truncated = object.slice(..object.len() - 10);
        assert!(matches!(open(&truncated), Err(Damage::Truncated { found: 90, expected: 100 })));
        let mut flipped = object.to_vec();
        flipped[HEADER_LEN + 3] ^= 1;
        assert!(matches!(open(&Bytes::from(flipped)), Err(Damage::Corrupted)));
        let mut longer = object.to_vec();
        longer.push(0);
        assert!(matches!(open(&Bytes::from(longer)), Err(Damage::TrailingBytes { extra: 1 })));
        assert!(matches!(open(&Bytes::from_static(b"SQLite format 3\0")), Err(Damage::NotOurs)));
        assert!(matches!(open(&object.slice(..20)), Err(Damage::Truncated { .. })));
    }
}
