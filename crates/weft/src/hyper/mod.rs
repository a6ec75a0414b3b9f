//! hyper 1.x on weft: [`WeftIo`] (a weft stream as hyper's `Read + Write`),
//! [`WeftExecutor`] (hyper's background tasks as weft tasks) and [`WeftTimer`]
//! (hyper's timeouts on weft's timer wheel). Behind the `hyper` feature.
//!
//! hyper brings the HTTP protocol and leaves the runtime to its user through three
//! traits of `hyper::rt`; these types implement them on weft, as `hyper-util`'s
//! `TokioIo`, `TokioExecutor` and `TokioTimer` do on tokio. A connection is served (or
//! driven, on the client side) by an ordinary weft task.
//!
//! ```
//! use std::convert::Infallible;
//! use http_body_util::{BodyExt, Full};
//! use hyper::body::Bytes;
//! use weft::hyper::{WeftExecutor, WeftIo, WeftTimer};
//!
//! let rt = weft::Runtime::new().unwrap();
//! rt.block_on(async {
//!     let listener = weft::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//!     let addr = listener.local_addr().unwrap();
//!     // The server: one task per connection.
//!     weft::spawn(async move {
//!         loop {
//!             let (stream, _) = listener.accept().await.unwrap();
//!             weft::spawn(async move {
//!                 let service = hyper::service::service_fn(|_req| async {
//!                     Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from("hi"))))
//!                 });
//!                 let _ = hyper::server::conn::http1::Builder::new()
//!                     .timer(WeftTimer::new())
//!                     .serve_connection(WeftIo::new(stream), service)
//!                     .await;
//!             });
//!         }
//!     });
//!     // The client: a handshake over a weft stream, its connection driven by a task.
//!     let stream = weft::net::TcpStream::connect(addr).await.unwrap();
//!     let (mut sender, conn) = hyper::client::conn::http1::handshake(WeftIo::new(stream))
//!         .await
//!         .unwrap();
//!     hyper::rt::Executor::execute(&WeftExecutor::new(), async move {
//!         let _ = conn.await;
//!     });
//!     let req = hyper::Request::get("/").body(Full::new(Bytes::new())).unwrap();
//!     let res = sender.send_request(req).await.unwrap();
//!     assert_eq!(res.status(), 200);
//!     let body = res.into_body().collect().await.unwrap().to_bytes();
//!     assert_eq!(&body[..], b"hi");
//! });
//! ```

mod executor;
mod io;
mod timer;

pub use executor::WeftExecutor;
pub use io::WeftIo;
pub use timer::WeftTimer;
