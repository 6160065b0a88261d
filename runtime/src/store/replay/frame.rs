//! Record framing: `[len: u32 LE][crc32 of payload: u32 LE][payload]`.

use thiserror::Error;

/// Bytes of a frame header.
pub const HEADER: usize = 8;
/// Largest payload accepted when reading; a larger length means a corrupt header.
pub const MAX_PAYLOAD: u32 = 64 << 20;

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The data ends inside a frame.
    #[error("the file ends inside a record ({have} of {need} bytes)")]
    Truncated {
        /// Bytes present.
        have: usize,
        /// Bytes the frame needs.
        need: usize,
    },
    /// The length field is implausible.
    #[error("record length {0} is implausible")]
    BadLength(u32),
    /// The payload does not match its checksum.
    #[error("record checksum mismatch")]
    Checksum,
}

impl FrameError {
    /// Whether the data simply ends inside the frame (a torn tail), rather than
    /// holding a frame that is wrong.
    pub fn is_truncation(&self) -> bool {
        matches!(self, Self::Truncated { .. })
    }
}

/// Frames `payload`.
pub fn encode_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads the frame at the start of `data`: its payload and total length.
pub fn decode_frame(data: &[u8]) -> Result<(&[u8], usize), FrameError> {
    if data.len() < HEADER {
        return Err(FrameError::Truncated {
            have: data.len(),
            need: HEADER,
        });
    }
    let len = u32::from_le_bytes(data[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(data[4..8].try_into().expect("4 bytes"));
    // No record encodes to zero bytes; a zeroed header (length 0, checksum 0, which
    // is the checksum of nothing) is damage, not an empty record.
    if len == 0 || len > MAX_PAYLOAD {
        return Err(FrameError::BadLength(len));
    }
    let end = HEADER + len as usize;
    if data.len() < end {
        return Err(FrameError::Truncated {
            have: data.len(),
            need: end,
        });
    }
    let payload = &data[HEADER..end];
    if crc32fast::hash(payload) != crc {
        return Err(FrameError::Checksum);
    }
    Ok((payload, end))
}

/// The offset of the first intact frame after damage at `damaged`, for a reader to go
/// on from: first where the damaged frame's own length says the next one begins (a
/// flipped payload byte leaves its header intact), else the first byte offset where a
/// frame with a matching checksum starts. `accept` decides whether a candidate frame's
/// payload is a record (a checksum match on random bytes is rare, a decodable record
/// at the same place rarer). `None`: no intact frame follows.
pub fn resync(data: &[u8], damaged: usize, accept: impl Fn(&[u8]) -> bool) -> Option<usize> {
    let intact_at = |offset: usize| {
        data.get(offset..)
            .and_then(|rest| decode_frame(rest).ok())
            .is_some_and(|(payload, _)| accept(payload))
    };
    if let Some(header) = data.get(damaged..damaged + HEADER) {
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let next = damaged + HEADER + len as usize;
        if len > 0 && len <= MAX_PAYLOAD && next < data.len() && intact_at(next) {
            return Some(next);
        }
    }
    (damaged + 1..data.len().saturating_sub(HEADER)).find(|&offset| intact_at(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruptions() {
        let frame = encode_frame(b"hello");
        assert_eq!(decode_frame(&frame), Ok((&b"hello"[..], 13)));
        assert!(matches!(
            decode_frame(&frame[..10]),
            Err(FrameError::Truncated { .. })
        ));
        let mut flipped = frame.clone();
        flipped[10] ^= 1;
        assert_eq!(decode_frame(&flipped), Err(FrameError::Checksum));
        let mut huge = frame;
        huge[3] = 0xff;
        assert!(matches!(decode_frame(&huge), Err(FrameError::BadLength(_))));
        assert_eq!(decode_frame(&[0u8; 16]), Err(FrameError::BadLength(0)));
    }

    #[test]
    fn resync_finds_the_next_intact_frame_after_a_flip_or_a_zeroed_block() {
        let frames: Vec<Vec<u8>> = (0..4u8).map(|i| encode_frame(&[i; 40])).collect();
        let data: Vec<u8> = frames.concat();
        let any = |_: &[u8]| true;
        // A flipped payload byte: the damaged frame's length leads to the next one.
        let mut flipped = data.clone();
        flipped[60] ^= 1;
        assert_eq!(resync(&flipped, 48, any), Some(96));
        // A zeroed block over a header: found by scanning.
        let mut zeroed = data.clone();
        zeroed[48..60].fill(0);
        assert_eq!(resync(&zeroed, 48, any), Some(96));
        // Nothing intact after the damage.
        assert_eq!(resync(&data[..150], 144, any), None);
    }
}
