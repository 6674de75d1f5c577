//! The append stream's frames: `length u32 BE ++ bytes`, tokio-util's `LengthDelimitedCodec`.
//! A reader takes frames up to a limit and refuses a longer length before reading or allocating
//! any of the frame; a writer is not held to the reader's limit (each end sets its own).

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{Framed, LengthDelimitedCodec, LengthDelimitedCodecError};

/// A connection read and written in frames.
pub type Frames<S> = Framed<S, LengthDelimitedCodec>;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the connection closed")]
    Closed,
    #[error("a frame exceeds the limit of {max} bytes")]
    TooLong { max: usize },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// The codec's error, with a length over the limit told apart.
    fn of(err: std::io::Error, max: usize) -> Self {
        if err
            .get_ref()
            .is_some_and(|inner| inner.is::<LengthDelimitedCodecError>())
        {
            FrameError::TooLong { max }
        } else {
            FrameError::Io(err)
        }
    }
}

/// `io` in frames of at most `max` bytes read.
pub fn framed<S: AsyncRead + AsyncWrite>(io: S, max: usize) -> Frames<S> {
    let codec = LengthDelimitedCodec::builder()
        .length_field_type::<u32>()
        .big_endian()
        .max_frame_length(max)
        .new_codec();
    Framed::new(io, codec)
}

/// Reads one frame; `Closed` when the peer closed the connection between frames.
pub async fn read_frame<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Frames<S>,
) -> Result<BytesMut, FrameError> {
    let max = io.codec().max_frame_length();
    match io.next().await {
        None => Err(FrameError::Closed),
        Some(Ok(payload)) => Ok(payload),
        Some(Err(err)) => Err(FrameError::of(err, max)),
    }
}

/// Writes one frame holding `payload` and flushes it (one write of the length and the bytes).
pub async fn write_frame<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut Frames<S>,
    payload: Bytes,
) -> Result<(), FrameError> {
    // The codec refuses to write a frame over the limit; the limit is for reading.
    let max = io.codec().max_frame_length();
    io.codec_mut().set_max_frame_length(usize::MAX);
    let sent = io.send(payload).await;
    io.codec_mut().set_max_frame_length(max);
    sent.map_err(|err| FrameError::of(err, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    #[test]
    fn frames_cross_whole_and_a_length_beyond_the_limit_is_refused_unread() {
        run(async {
            let (a, b) = tokio::io::duplex(1 << 16);
            let (mut a, mut b) = (framed(a, 5), framed(b, 5));
            write_frame(&mut a, Bytes::from_static(b"hello"))
                .await
                .expect("sent");
            write_frame(&mut a, Bytes::new()).await.expect("sent");
            assert_eq!(&read_frame(&mut b).await.expect("read")[..], b"hello");
            assert_eq!(&read_frame(&mut b).await.expect("read")[..], b"");
            write_frame(&mut a, Bytes::from(vec![7u8; 6]))
                .await
                .expect("a sender is not held to the reader's limit");
            let err = read_frame(&mut b).await.expect_err("too long");
            assert!(matches!(err, FrameError::TooLong { max: 5 }), "{err}");

            // The bytes on the wire: the length, big-endian, then the payload.
            let (a, mut raw) = tokio::io::duplex(1 << 16);
            let mut a = framed(a, 16);
            write_frame(&mut a, Bytes::from_static(b"abc"))
                .await
                .expect("sent");
            let mut wire = [0u8; 7];
            tokio::io::AsyncReadExt::read_exact(&mut raw, &mut wire)
                .await
                .expect("read");
            assert_eq!(wire, [0, 0, 0, 3, b'a', b'b', b'c']);

            // A length of 4 GiB is refused before anything is allocated for it.
            let (endless, _keep) = tokio::io::duplex(64);
            let mut endless = framed(tokio::io::join(tokio::io::repeat(0xff), endless), 1 << 20);
            assert!(matches!(
                read_frame(&mut endless).await,
                Err(FrameError::TooLong { .. })
            ));

            // A frame cut short is an error; a close between frames is `Closed`.
            let (mut a, b) = tokio::io::duplex(1 << 16);
            tokio::io::AsyncWriteExt::write_all(&mut a, &[0, 0, 0, 9, 1, 2])
                .await
                .expect("sent");
            drop(a);
            assert!(matches!(
                read_frame(&mut framed(b, 16)).await,
                Err(FrameError::Io(_))
            ));
            let (a, b) = tokio::io::duplex(1 << 16);
            drop(a);
            assert!(matches!(
                read_frame(&mut framed(b, 16)).await,
                Err(FrameError::Closed)
            ));
        });
    }
}
