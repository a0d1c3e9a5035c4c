//! Frame Streams, the framing every dnstap reader speaks: a data frame is a
//! 32-bit big-endian length and that many octets; a control frame is an
//! escape (a length of 0), its own length, a control type and its fields
//! (each a type, a length and the value; only "content type", 1, exists).
//!
//! A writer on a bidirectional stream (a Unix socket to a reader) sends
//! READY with the content types it offers, reads the reader's ACCEPT, sends
//! START with the chosen one, then data frames; to end it sends STOP and
//! waits for FINISH.
//!
//! Written by hand: no Frame Streams crate is in the dependency tree, and
//! the codec is these five control frames over a length-prefixed stream, less
//! code than a new dependency to review.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The content type of dnstap data frames.
pub const DNSTAP_CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";

/// The control frame types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Accept = 1,
    Start = 2,
    Stop = 3,
    Ready = 4,
    Finish = 5,
}

/// The control field type "content type".
const FIELD_CONTENT_TYPE: u32 = 1;
/// The longest control frame read: the reader's ACCEPT lists content types;
/// anything longer is not a reader speaking Frame Streams.
const MAX_CONTROL_FRAME: usize = 512;

/// A control frame with `content_type` (or none), escape and length included.
pub fn control_frame(control: Control, content_type: Option<&[u8]>) -> Vec<u8> {
    let mut body = (control as u32).to_be_bytes().to_vec();
    if let Some(ct) = content_type {
        body.extend_from_slice(&FIELD_CONTENT_TYPE.to_be_bytes());
        body.extend_from_slice(&(ct.len() as u32).to_be_bytes());
        body.extend_from_slice(ct);
    }
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&0u32.to_be_bytes());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Appends `payload` as a data frame to `out`.
pub fn push_data_frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A control frame read back: its type and content types.
#[derive(Debug, PartialEq, Eq)]
pub struct ControlFrame {
    pub control: u32,
    pub content_types: Vec<Vec<u8>>,
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// Reads one control frame (a data frame here is a protocol error).
pub async fn read_control<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<ControlFrame> {
    if r.read_u32().await? != 0 {
        return Err(invalid("a data frame where a control frame was expected"));
    }
    let len = r.read_u32().await? as usize;
    if !(4..=MAX_CONTROL_FRAME).contains(&len) {
        return Err(invalid(format!("a control frame of {len} octets")));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).await?;
    parse_control(&body)
}

/// The fields of a control frame's body.
fn parse_control(body: &[u8]) -> io::Result<ControlFrame> {
    let word = |at: usize| body.get(at..at + 4).map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    let control = word(0).ok_or_else(|| invalid("a control frame without a type"))?;
    let mut content_types = Vec::new();
    let mut at = 4;
    while at < body.len() {
        let (Some(field), Some(len)) = (word(at), word(at + 4)) else {
            return Err(invalid("a truncated control field"));
        };
        let value = body.get(at + 8..at + 8 + len as usize).ok_or_else(|| invalid("a truncated control field"))?;
        if field == FIELD_CONTENT_TYPE {
            content_types.push(value.to_vec());
        }
        at += 8 + len as usize;
    }
    Ok(ControlFrame { control, content_types })
}

/// The writer's side of the bidirectional handshake: READY, the reader's
/// ACCEPT (which must list [`DNSTAP_CONTENT_TYPE`]), START.
pub async fn open<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> io::Result<()> {
    s.write_all(&control_frame(Control::Ready, Some(DNSTAP_CONTENT_TYPE))).await?;
    s.flush().await?;
    let accept = read_control(s).await?;
    if accept.control != Control::Accept as u32 {
        return Err(invalid(format!("the reader answered READY with control frame {}", accept.control)));
    }
    if !accept.content_types.iter().any(|ct| ct == DNSTAP_CONTENT_TYPE) {
        return Err(invalid("the reader does not accept protobuf:dnstap.Dnstap"));
    }
    s.write_all(&control_frame(Control::Start, Some(DNSTAP_CONTENT_TYPE))).await?;
    s.flush().await
}

/// The writer's end: STOP, then the reader's FINISH.
pub async fn close<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> io::Result<()> {
    s.write_all(&control_frame(Control::Stop, None)).await?;
    s.flush().await?;
    let finish = read_control(s).await?;
    if finish.control != Control::Finish as u32 {
        return Err(invalid(format!("the reader answered STOP with control frame {}", finish.control)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_frame_is_laid_out_as_the_protocol_says() {
        let f = control_frame(Control::Ready, Some(b"ab"));
        assert_eq!(f, vec![0, 0, 0, 0, 0, 0, 0, 14, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 2, b'a', b'b']);
        assert_eq!(control_frame(Control::Stop, None), vec![0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 3]);
        let mut out = Vec::new();
        push_data_frame(&mut out, b"xyz");
        assert_eq!(out, vec![0, 0, 0, 3, b'x', b'y', b'z']);
    }

    #[tokio::test]
    async fn control_frames_read_back_and_bad_ones_are_refused() {
        let frame = control_frame(Control::Accept, Some(DNSTAP_CONTENT_TYPE));
        let read = read_control(&mut &frame[..]).await.unwrap();
        assert_eq!(read, ControlFrame { control: 1, content_types: vec![DNSTAP_CONTENT_TYPE.to_vec()] });
        // A data frame, an oversized frame, a truncated field.
        for bad in [
            vec![0, 0, 0, 3, 1, 2, 3],
            vec![0, 0, 0, 0, 0, 1, 0, 0],
            vec![0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9],
        ] {
            assert!(read_control(&mut &bad[..]).await.is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn the_handshake_and_the_end_against_a_reader() {
        let (mut writer, mut reader) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move {
            let ready = read_control(&mut reader).await.unwrap();
            assert_eq!(ready.control, Control::Ready as u32);
            reader.write_all(&control_frame(Control::Accept, Some(DNSTAP_CONTENT_TYPE))).await.unwrap();
            let start = read_control(&mut reader).await.unwrap();
            assert_eq!(start, ControlFrame { control: 2, content_types: vec![DNSTAP_CONTENT_TYPE.to_vec()] });
            let len = reader.read_u32().await.unwrap();
            let mut data = vec![0; len as usize];
            reader.read_exact(&mut data).await.unwrap();
            assert_eq!(read_control(&mut reader).await.unwrap().control, Control::Stop as u32);
            reader.write_all(&control_frame(Control::Finish, None)).await.unwrap();
            data
        });
        open(&mut writer).await.unwrap();
        let mut frame = Vec::new();
        push_data_frame(&mut frame, b"payload");
        writer.write_all(&frame).await.unwrap();
        close(&mut writer).await.unwrap();
        assert_eq!(reader.await.unwrap(), b"payload");
    }

    #[tokio::test]
    async fn a_reader_offering_another_content_type_is_refused() {
        let (mut writer, mut reader) = tokio::io::duplex(1024);
        tokio::spawn(async move {
            let _ = read_control(&mut reader).await;
            let _ = reader.write_all(&control_frame(Control::Accept, Some(b"protobuf:other"))).await;
            // Held open until the writer gives up.
            let _ = read_control(&mut reader).await;
        });
        let err = open(&mut writer).await.unwrap_err();
        assert!(err.to_string().contains("does not accept"), "{err}");
    }
}
