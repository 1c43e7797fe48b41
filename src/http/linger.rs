//! How a connection is closed. The kernel closes a socket that still has unread bytes in its
//! receive buffer with a reset, and a reset makes the client lose the answer waiting in its own
//! receive buffer: a client that was still sending a body the server never read (a 413 from the
//! declared length, a 408, any answer given before the body was read) saw a broken pipe or a
//! reset instead of the answer. So, as HTTP servers do, a socket hyper is done with is shut for
//! writing (the client reads the answer, then the end) and what the client still sends is read
//! and discarded, within [`LINGER_TIME`] and [`LINGER_BYTES`], before it is closed.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
    sync::oneshot,
    time::Instant,
};

/// How long a closing connection reads what its client still sends. The connection keeps its
/// slot under `max_connections` meanwhile; a client that closes its side ends it at once.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// How much a closing connection reads and discards at most: a body several times the default
/// `body_limit`, beyond which the client gets the reset it would have got anyway.
pub const LINGER_BYTES: usize = 8 * 1024 * 1024;

/// The socket as hyper serves it: when hyper drops it, it is handed back (to [`linger`]) instead
/// of being closed.
pub struct HandedBack {
    stream: Option<TcpStream>,
    back: Option<oneshot::Sender<TcpStream>>,
}

/// `stream` for hyper, and where it comes back once hyper has dropped it.
pub fn hand_back(stream: TcpStream) -> (HandedBack, oneshot::Receiver<TcpStream>) {
    let (back, returned) = oneshot::channel();
    let stream = HandedBack {
        stream: Some(stream),
        back: Some(back),
    };
    (stream, returned)
}

impl HandedBack {
    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.stream.as_mut().expect("taken only on drop"))
    }
}

impl Drop for HandedBack {
    fn drop(&mut self) {
        if let (Some(stream), Some(back)) = (self.stream.take(), self.back.take()) {
            // No one to take it (the connection's task is gone): it closes here.
            let _ = back.send(stream);
        }
    }
}

impl AsyncRead for HandedBack {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.stream().poll_read(cx, buf)
    }
}

impl AsyncWrite for HandedBack {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}

/// Closes `stream` without a reset: shuts the write side (hyper may have already), then reads
/// and discards until the client closes, [`LINGER_TIME`] has passed or [`LINGER_BYTES`] were read.
pub async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let deadline = Instant::now() + LINGER_TIME;
    let mut buffer = vec![0u8; 16 * 1024];
    let mut discarded = 0;
    while discarded < LINGER_BYTES {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(read)) if read > 0 => discarded += read,
            // The client closed its side, the connection failed, or the time is up.
            _ => return,
        }
    }
}
