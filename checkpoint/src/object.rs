//! The envelope of every object the checkpoint writes: a magic, what the object is, the length of
//! the stored (deflated) body, the length and SHA-256 of the payload, then the body. A restore
//! checks them all before it uses a byte, so a truncated or corrupted object is an error that
//! names the object, never a half-restored database (SQLite's own WAL recovery would silently
//! stop at a bad frame). Bodies are deflated: WAL frames are whole 4 KiB pages, mostly empty.

use std::io::{Read, Write};

use bytes::{BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};

/// The first bytes of every checkpoint object, with the format's version.
const MAGIC: &[u8; 8] = b"ANYCKPT1";
/// Magic, kind, stored length, payload length, SHA-256 of the payload.
const HEADER_LEN: usize = 8 + 1 + 8 + 8 + 32;

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
    let mut deflate = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let body = deflate.write_all(payload).and_then(|()| deflate.finish()).unwrap_or_default();
    let mut out = BytesMut::with_capacity(HEADER_LEN + body.len());
    out.put_slice(MAGIC);
    out.put_u8(kind.byte());
    out.put_u64(body.len() as u64);
    out.put_u64(payload.len() as u64);
    out.put_slice(&Sha256::digest(payload));
    out.put_slice(&body);
    out.freeze()
}

/// Why an object could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// Not one of ours.
    #[error("it is not an anycloud checkpoint object (it does not start with {MAGIC:?})")]
    NotOurs,
    /// Shorter than its header says.
    #[error("it is truncated: {found} bytes of body where its header says {expected}")]
    Truncated {
        /// Payload bytes present.
        found: usize,
        /// Payload bytes announced.
        expected: u64,
    },
    /// Longer than its header says.
    #[error("it has {extra} bytes after its body")]
    TrailingBytes {
        /// Bytes past the payload.
        extra: usize,
    },
    /// The bytes are not the ones written.
    #[error("it is corrupted: its body does not inflate to the length and SHA-256 recorded when it was written")]
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
    let number = |at: usize| object[at..at + 8].try_into().map(u64::from_be_bytes).map_err(|_| Damage::NotOurs);
    let (stored, expected) = (number(9)?, number(17)?);
    let body = object.slice(HEADER_LEN..);
    let announced = usize::try_from(stored).unwrap_or(usize::MAX);
    if body.len() < announced {
        return Err(Damage::Truncated { found: body.len(), expected: stored });
    }
    if body.len() > announced {
        return Err(Damage::TrailingBytes { extra: body.len() - announced });
    }
    let mut payload = Vec::with_capacity(usize::try_from(expected).unwrap_or(0).min(1 << 30));
    // Reads at most one byte past the announced length, so a lying header cannot exhaust memory.
    let inflated =
        flate2::read::DeflateDecoder::new(&body[..]).take(expected.saturating_add(1)).read_to_end(&mut payload);
    if inflated.is_err() || payload.len() as u64 != expected || Sha256::digest(&payload).as_slice() != &object[25..57] {
        return Err(Damage::Corrupted);
    }
    Ok((kind, Bytes::from(payload)))
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
        let payload: Vec<u8> = (0..100u8).collect();
        let object = seal(Kind::Snapshot, &payload);
        let stored = object.len() - HEADER_LEN;
        let truncated = object.slice(..object.len() - 2);
        assert!(
            matches!(open(&truncated), Err(Damage::Truncated { found, expected }) if found + 2 == stored && expected == stored as u64)
        );
        let mut flipped = object.to_vec();
        flipped[HEADER_LEN + 1] ^= 1;
        assert!(matches!(open(&Bytes::from(flipped)), Err(Damage::Corrupted)));
        let mut longer = object.to_vec();
        longer.push(0);
        assert!(matches!(open(&Bytes::from(longer)), Err(Damage::TrailingBytes { extra: 1 })));
        assert!(matches!(open(&Bytes::from_static(b"SQLite format 3\0")), Err(Damage::NotOurs)));
        assert!(matches!(open(&object.slice(..20)), Err(Damage::Truncated { .. })));
    }

    #[test]
    fn pages_are_stored_deflated() {
        let mut page = vec![0u8; 4096];
        page[..64].copy_from_slice(&[0x0d; 64]);
        let object = seal(Kind::Wal, &page);
        assert!(object.len() < 200, "a mostly empty page takes {} bytes", object.len());
        assert_eq!(&open(&object).unwrap_or_else(|err| panic!("{err}")).1[..], &page[..]);
    }
}
