//! The API's listener, HTTPS or (on loopback only) plain HTTP, made to hold when clients
//! misbehave. Its limits are the constants below, one place for all of them (docs/security.md,
//! "An attacker on the network"; docs/hosting.md):
//!
//! - A TLS handshake must end within [`TLS_HANDSHAKE_TIMEOUT`] of the accept, or the connection
//!   is closed: a client that connects and sends nothing holds a slot that long at most.
//! - A request's header must arrive whole within [`HEADER_READ_TIMEOUT`]: the first one's from
//!   the moment the connection is ready (after the handshake), each next one's from the end of
//!   the answer before it (hyper's `header_read_timeout`). So a client that trickles a header
//!   is cut off, and a kept-alive connection that stays idle that long is closed too. A header
//!   larger than [`MAX_HEADER_BYTES`] is refused with 431. Bodies are bounded by the router
//!   ([`super::BODY_LIMIT`], `413 BODY_TOO_LARGE`); a streamed answer (`logs --follow`) or an
//!   upgraded connection (exec) is not timed here: its route bounds how many there are at once
//!   ([`super::streams`]).
//! - At most [`max_connections`] connections are open at once ([`MAX_CONNECTIONS`], fewer if
//!   the process may open fewer files). A connection beyond it is accepted and closed at once,
//!   rather than left in the kernel's backlog: a flood then costs an accept and a close per
//!   connection, a client learns at once that the API is full rather than waiting behind the
//!   flood, and what the API accepts when slots free up is a client that is still there.
//! - An accept that fails (too many open files, no buffers, ...) is tried again after a pause
//!   that doubles from [`ACCEPT_PAUSE_FIRST`] to [`ACCEPT_PAUSE_MAX`], as Go's `net/http`
//!   does, rather than at once in a loop that would spin a core.
//! - On stop, no connection is accepted any more; each open one answers the request in hand and
//!   closes, and the API waits for them at most [`SHUTDOWN_GRACE`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_rustls::TlsAcceptor;

/// How long a TLS handshake may take, from the accept to its end.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request's header may take to arrive whole; also how long a kept-alive connection
/// may stay idle between requests.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request header (request line and fields) read; a larger one gets 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The most connections open at once, if the process may open enough files.
pub const MAX_CONNECTIONS: usize = 4096;

/// Files kept for everything but the listener's connections: the database, the simulated
/// Kubernetes' listener and its clients, provider calls, log files, processes' pipes.
pub const FILES_KEPT: u64 = 512;

/// The fewest connections an API allows, however few files it may open.
const MIN_CONNECTIONS: usize = 64;

/// The pause after a first failed accept.
pub const ACCEPT_PAUSE_FIRST: Duration = Duration::from_millis(5);

/// The longest pause between failed accepts.
pub const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// How long a stopping API waits for its open connections to answer the requests in hand.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The connection limit of this process: [`MAX_CONNECTIONS`], or fewer if it may open fewer
/// files than that plus [`FILES_KEPT`]. The soft limit on open files is raised to the hard one
/// first (what Go programs do at start): services often start with a soft limit of 1024 and a
/// far higher hard one.
pub fn max_connections() -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let mut files = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (files.current, files.maximum)
        && current < maximum
    {
        let raised = Rlimit { current: Some(maximum), maximum: Some(maximum) };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => files = raised,
            Err(err) => tracing::warn!(error = %err, "could not raise the limit on open files to its maximum"),
        }
    }
    match files.current {
        None => MAX_CONNECTIONS,
        Some(open) => {
            let room = usize::try_from(open.saturating_sub(FILES_KEPT)).unwrap_or(usize::MAX);
            room.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
        }
    }
}

/// Serves `app` on `listener` (over TLS with `tls`, else plain HTTP) until `stop` resolves, with
/// at most `limit` connections at once ([`max_connections`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limit: usize,
    stop: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limit));
    let (stopping, stopped) = watch::channel(false);
    let acceptor = tls.map(TlsAcceptor::from);
    tracing::info!(limit, "accepting at most {limit} connections at once");
    let mut pause: Option<Duration> = None;
    let mut full = false;
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                pause = None;
                stream
            }
            Err(err) => {
                let wait = pause.map_or(ACCEPT_PAUSE_FIRST, |pause| (pause * 2).min(ACCEPT_PAUSE_MAX));
                if pause.is_none() {
                    tracing::warn!(error = %err, "accepting a connection failed: trying again after pauses up to 1 s");
                }
                pause = Some(wait);
                tokio::select! {
                    () = tokio::time::sleep(wait) => continue,
                    () = &mut stop => break,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !full {
                tracing::warn!(limit, "{limit} connections are open, the most this API holds: new ones are closed");
                full = true;
            }
            drop(stream);
            continue;
        };
        full = false;
        let _ = stream.set_nodelay(true);
        let held = Held { stream, _slot: slot };
        tokio::spawn(connection(held, acceptor.clone(), app.clone(), stopped.clone()));
    }
    drop(listener);
    let _ = stopping.send(true);
    let all = u32::try_from(limit).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, slots.acquire_many(all)).await.is_err() {
        tracing::info!("stopping with connections still open after {} s", SHUTDOWN_GRACE.as_secs());
    }
}

/// One connection: its handshake, if TLS, then HTTP/1.1 until it closes.
async fn connection(stream: Held, acceptor: Option<TlsAcceptor>, app: Router, stopped: watch::Receiver<bool>) {
    let Some(acceptor) = acceptor else {
        return http(stream, app, stopped).await;
    };
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => http(tls, app, stopped).await,
        Ok(Err(err)) => tracing::debug!(error = %err, "a TLS handshake failed"),
        Err(_) => tracing::debug!("a TLS handshake did not end within {} s: closed", TLS_HANDSHAKE_TIMEOUT.as_secs()),
    }
}

/// HTTP/1.1 with upgrades (exec's WebSocket) on `io`; on stop, the request in hand is answered
/// and the connection closed.
async fn http<I>(io: I, app: Router, mut stopped: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT).max_buf_size(MAX_HEADER_BYTES);
    let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app)).with_upgrades();
    tokio::pin!(connection);
    let stop = async {
        let _ = stopped.wait_for(|stopped| *stopped).await;
    };
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = stop => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(err) = served {
        tracing::debug!(error = %err, "a connection ended with an error");
    }
}

/// A connection with its slot, given back when the connection is dropped: after an upgrade,
/// when the WebSocket is.
struct Held {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Held {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_connection_limit_leaves_files_for_the_rest() {
        let limit = super::max_connections();
        assert!((super::MIN_CONNECTIONS..=super::MAX_CONNECTIONS).contains(&limit), "{limit}");
        let files = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(files.current, files.maximum, "the soft limit on open files was raised to the hard one");
        if let Some(open) = files.current
            && open >= super::MIN_CONNECTIONS as u64 + super::FILES_KEPT
        {
            assert!(limit as u64 + super::FILES_KEPT <= open, "{limit} connections and {open} files");
        }
    }
}
