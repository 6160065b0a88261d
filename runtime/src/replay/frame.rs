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
    if len > MAX_PAYLOAD {
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
    }
}
