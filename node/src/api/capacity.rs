//! Admission at the edge: how many requests of one class run at once, and how many may wait.
//!
//! Clients and peers have separate capacity, so that a flood of client requests (or reads
//! waiting on a far `min_index`) never delays a heartbeat: peers queue behind peers only. A
//! request that finds every slot taken and the queue full is refused at once with 503
//! `overloaded` and `Retry-After`, rather than joining an unbounded queue whose wait would
//! outlast its caller's patience.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::error::ApiError;
use crate::metrics::Metrics;

/// The requests of one class: at most `running` at once, at most `queued` more waiting.
pub struct Capacity {
    class: &'static str,
    slots: Semaphore,
    waiting: AtomicUsize,
    queued: usize,
    metrics: Arc<Metrics>,
}

/// Leaves the queue when dropped, also when the waiting request is cancelled.
struct InQueue<'a>(&'a AtomicUsize);

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Capacity {
    /// Capacity for the class `class` (`client` or `peer`, named in refusals and counted in
    /// `metrics`).
    pub fn new(
        class: &'static str,
        running: usize,
        queued: usize,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            class,
            slots: Semaphore::new(running.max(1)),
            waiting: AtomicUsize::new(0),
            queued,
            metrics,
        })
    }

    async fn run(&self, request: Request, next: Next) -> Response {
        if let Ok(_slot) = self.slots.try_acquire() {
            return next.run(request).await;
        }
        let ahead = self.waiting.fetch_add(1, Ordering::AcqRel);
        let in_queue = InQueue(&self.waiting);
        if ahead >= self.queued {
            drop(in_queue);
            self.metrics.record_shed(self.class);
            return ApiError::overloaded(format!(
                "the node is serving as many {} requests as it may and as many wait; try again",
                self.class
            ))
            .into_response();
        }
        // The semaphore is never closed.
        let Ok(_slot) = self.slots.acquire().await else {
            return ApiError::unavailable("the node is shutting down").into_response();
        };
        drop(in_queue);
        next.run(request).await
    }
}

/// Middleware: admits the request into `capacity` or refuses it.
pub async fn admit(
    State(capacity): State<Arc<Capacity>>,
    request: Request,
    next: Next,
) -> Response {
    capacity.run(request, next).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use axum::Router;
    use tokio::sync::Notify;
    use tower::ServiceExt;

    use super::*;

    /// A router whose one route blocks until `release` is notified.
    fn blocking(capacity: Arc<Capacity>, release: Arc<Notify>) -> Router {
        Router::new()
            .route(
                "/",
                get(move || {
                    let release = Arc::clone(&release);
                    async move {
                        release.notified().await;
                        "done"
                    }
                }),
            )
            .route_layer(axum::middleware::from_fn_with_state(capacity, admit))
    }

    fn call(router: &Router) -> tokio::task::JoinHandle<StatusCode> {
        let router = router.clone();
        tokio::spawn(async move {
            let request = Request::get("/").body(Body::empty()).expect("request");
            router.oneshot(request).await.expect("infallible").status()
        })
    }

    #[tokio::test]
    async fn beyond_the_running_and_queued_requests_the_rest_are_refused_at_once() {
        let metrics = Arc::new(Metrics::default());
        let capacity = Capacity::new("client", 2, 1, Arc::clone(&metrics));
        let release = Arc::new(Notify::new());
        let router = blocking(Arc::clone(&capacity), Arc::clone(&release));
        let admitted: Vec<_> = (0..3).map(|_| call(&router)).collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Two run, one waits: the fourth and fifth are refused without waiting.
        for _ in 0..2 {
            let refused = tokio::time::timeout(Duration::from_secs(1), call(&router))
                .await
                .expect("refused at once")
                .expect("task");
            assert_eq!(refused, StatusCode::SERVICE_UNAVAILABLE);
        }
        assert_eq!(metrics.shed("client"), 2);
        // Releasing the running ones lets the queued one through.
        for _ in 0..3 {
            release.notify_one();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for call in admitted {
            assert_eq!(call.await.expect("task"), StatusCode::OK);
        }
        // A waiter that gives up leaves the queue: the queue is free again.
        let gave_up = call(&router);
        let second = call(&router);
        let queued = call(&router);
        tokio::time::sleep(Duration::from_millis(50)).await;
        queued.abort();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(capacity.waiting.load(Ordering::Acquire), 0);
        let requeued = call(&router);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            metrics.shed("client"),
            2,
            "the aborted waiter's place was given back"
        );
        for _ in 0..3 {
            release.notify_one();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for call in [gave_up, second, requeued] {
            assert_eq!(call.await.expect("task"), StatusCode::OK);
        }
    }
}
